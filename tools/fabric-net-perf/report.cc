#include "report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace nnf::perf {
namespace {

bool isLat(const Report& r) {
  return r.opts.latency();
}

// "rma put-signal" for the rma mode, the mode's name otherwise.
std::string modeTitle(const Options& opts) {
  if (opts.mode != Mode::kRma) return modeName(opts.mode);
  return std::string("rma ") + rmaOpName(opts.rmaOp);
}

void printRmaLine(const Report& r, FILE* out) {
  int ranks = r.opts.numRanks();
  const char* shape = ranks > 2 ? "all-to-all" : "rank 0 to rank 1";
  if (r.opts.latency())
    std::fprintf(out,
                 "# rma put-signal: %d ranks, %s; the target waits on its signal word (raw: "
                 "its CQ) before it answers;\n#   time = %s\n",
                 ranks, ranks > 2 ? "every rank to every other at once" : "ping-pong",
                 ranks > 2 ? "one all-to-all step" : "half the round trip (one way)");
  else
    std::fprintf(out,
                 "# rma %s: %d ranks, %s, %d operations in flight per peer; time per "
                 "operation, GB/s %s per rank\n",
                 rmaOpName(r.opts.rmaOp), ranks, shape, r.opts.window,
                 r.opts.rmaOp == RmaOp::kGet ? "read" : "written");
}

bool isRate(const Report& r) {
  return r.opts.mode == Mode::kMsgrate;
}

// The headline number of a row: bandwidth, message rate, or latency.
double metric(const Report& r, const Row& row) {
  return isLat(r) ? row.timeUs : isRate(r) ? row.mmsgs : row.gbps;
}

const char* metricName(const Report& r) {
  return isLat(r) ? "p99(us)" : isRate(r) ? "Mmsg/s" : "GB/s";
}

const char* timeName(const Report& r) {
  return isLat(r) ? "median(us)" : "time(us)";
}

// Plugin as a percentage of raw, higher is better: raw time over plugin time per message (or
// per step, or per half round trip). For the same bytes that is also the ratio of bandwidths
// and rates, and it stays defined for zero-byte messages.
double ratio(const Report&, const Row& p, const Row& raw) {
  if (p.timeUs <= 0 || raw.timeUs <= 0) return 0;
  return 100.0 * raw.timeUs / p.timeUs;
}

bool both(const Report& r) {
  return r.hasPlugin && r.hasRaw && r.plugin.size() == r.raw.size();
}

size_t rowCount(const Report& r) {
  return std::max(r.plugin.size(), r.raw.size());
}

const Row& anyRow(const Report& r, size_t i) {
  return i < r.plugin.size() ? r.plugin[i] : r.raw[i];
}

std::string csvCell(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4f", v);
  return text;
}

const char* sideName(const CommsSide& side) {
  return side.receiver ? "receiver" : "sender";
}

double mib(long bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

// The comms mode: one row per side.
void printCommsTable(const Report& r, FILE* out) {
  std::fprintf(out, "# fabric-net-perf comms, provider %s, every byte checked\n",
               r.provider.c_str());
  std::fprintf(out, "# plugin: %s\n", r.pluginInfo.c_str());
  std::fprintf(
      out,
      "# comms: %d comms open at once, one %zu-byte message on each; the receiver (rank 0)\n"
      "#        listens, accepts and receives, the sender (rank 1) connects and sends;\n"
      "#        RSS/comm = growth of the resident size from before the first listen or\n"
      "#        connect to all comms open after the data, over the number of comms\n",
      r.opts.comms, r.opts.minBytes);
  std::fprintf(out, "#\n");
  const char* format = "%-10s %8s %6s %9s %9s %9s %9s %8s %8s %6s %6s %6s\n";
  std::fprintf(out, format, "#     side", "comms", "size", "set-up", "data", "close", "RSS/comm",
               "RSS(MiB)", "RSS(MiB)", "fds", "fds", "fds");
  std::fprintf(out, format, "#", "", "(B)", "(s)", "(s)", "(s)", "(B)", "before", "open", "before",
               "open", "closed");
  for (const CommsSide& side : r.sides)
    std::fprintf(out, "%10s %8ld %6zu %9.3f %9.3f %9.3f %9.0f %8.1f %8.1f %6d %6d %6d\n",
                 sideName(side), side.comms, side.bytes, side.setupSec, side.dataSec, side.closeSec,
                 side.rssPerComm(), mib(side.rssBefore), mib(side.rssOpen), side.fdsBefore,
                 side.fdsOpen, side.fdsClosed);
  std::fprintf(out, "# Data check: every byte of every message verified, no mismatch\n");
}

bool writeCommsCsv(const Report& r, std::ofstream& out) {
  out << "mode,provider,side,rank,comms,bytes,setup_s,data_s,close_s,rss_bytes_per_comm,"
         "rss_before_bytes,rss_open_bytes,fds_before,fds_open,fds_closed\n";
  for (const CommsSide& x : r.sides)
    out << modeName(r.opts.mode) << ',' << r.provider << ',' << sideName(x) << ',' << x.rank << ','
        << x.comms << ',' << x.bytes << ',' << csvCell(x.setupSec) << ',' << csvCell(x.dataSec)
        << ',' << csvCell(x.closeSec) << ',' << csvCell(x.rssPerComm()) << ',' << x.rssBefore << ','
        << x.rssOpen << ',' << x.fdsBefore << ',' << x.fdsOpen << ',' << x.fdsClosed << '\n';
  return static_cast<bool>(out);
}

std::string commsJsonRow(const CommsSide& x) {
  return std::string("{\"side\": \"") + sideName(x) + "\", \"rank\": " + std::to_string(x.rank) +
         ", \"comms\": " + std::to_string(x.comms) + ", \"bytes\": " + std::to_string(x.bytes) +
         ", \"setup_s\": " + csvCell(x.setupSec) + ", \"data_s\": " + csvCell(x.dataSec) +
         ", \"close_s\": " + csvCell(x.closeSec) +
         ", \"rss_bytes_per_comm\": " + csvCell(x.rssPerComm()) +
         ", \"rss_before_bytes\": " + std::to_string(x.rssBefore) +
         ", \"rss_open_bytes\": " + std::to_string(x.rssOpen) +
         ", \"fds_before\": " + std::to_string(x.fdsBefore) +
         ", \"fds_open\": " + std::to_string(x.fdsOpen) +
         ", \"fds_closed\": " + std::to_string(x.fdsClosed) + "}";
}

}  // namespace

void printTable(const Report& r, FILE* out) {
  if (r.opts.mode == Mode::kComms) return printCommsTable(r, out);
  std::string mode = modeTitle(r.opts);
  std::fprintf(out, "# fabric-net-perf %s, provider %s, %s check\n", mode.c_str(),
               r.provider.c_str(), r.fullCheck ? "full" : "first/last bytes");
  if (r.hasPlugin) std::fprintf(out, "# plugin: %s\n", r.pluginInfo.c_str());
  if (r.hasRaw) std::fprintf(out, "# raw:    %s\n", r.rawInfo.c_str());
  if (r.opts.mode == Mode::kAlltoall)
    std::fprintf(out,
                 "# alltoall: %d ranks, each peer gets 0..2x size (uneven); time per step, "
                 "GB/s sent per rank\n",
                 anyRow(r, 0).comms);
  if (r.opts.mode == Mode::kBibw) std::fprintf(out, "# bibw: GB/s of both directions together\n");
  if (r.opts.mode == Mode::kRma) printRmaLine(r, out);
  if (r.opts.mode == Mode::kLat)
    std::fprintf(out, "# lat: half round trip, ratio = raw median / plugin median\n");
  if (r.opts.mode == Mode::kRma && isLat(r))
    std::fprintf(out, "#   ratio = raw median / plugin median\n");
  if (r.opts.order != Order::kFree)
    std::fprintf(out,
                 "# order: %s (rounds of %d messages a comm, each ended by the acknowledgement)\n",
                 orderName(r.opts.order), r.opts.window);
  if (r.opts.load > 0)
    std::fprintf(out, "# load: %d busy-looping process%s beside the ranks\n", r.opts.load,
                 r.opts.load > 1 ? "es" : "");
  std::fprintf(out, "#\n");
  std::string head1 = "#       size  comms    count  window", head2 = "#        (B)";
  head2.resize(head1.size(), ' ');
  auto engineHead = [&](const char* name) {
    char a[64], b[64];
    std::snprintf(a, sizeof(a), "  %21s", name);
    std::snprintf(b, sizeof(b), "  %10s %10s", timeName(r), metricName(r));
    head1 += a;
    head2 += b;
  };
  if (r.hasPlugin) engineHead("plugin");
  if (r.hasRaw) engineHead("raw");
  if (both(r)) {
    head1 += "    ratio";
    head2 += "      (%)";
    if (isLat(r)) head1 += "   delta", head2 += "    (us)";
  }
  std::fprintf(out, "%s\n%s\n", head1.c_str(), head2.c_str());
  auto cells = [&](const Row& row) {
    std::fprintf(out, "  %10.2f %10.*f", row.timeUs,
                 isLat(r)    ? 2
                 : isRate(r) ? 3
                             : 2,
                 isLat(r) ? row.p99Us : metric(r, row));
  };
  double ratioSum = 0;
  int ratioRows = 0;
  for (size_t i = 0; i < rowCount(r); ++i) {
    const Row& row = anyRow(r, i);
    std::fprintf(out, "%12zu %6d %8ld %7d", row.bytes, row.comms, row.count, row.window);
    if (r.hasPlugin && i < r.plugin.size()) cells(r.plugin[i]);
    if (r.hasRaw && i < r.raw.size()) cells(r.raw[i]);
    if (both(r)) {
      double pct = ratio(r, r.plugin[i], r.raw[i]);
      std::fprintf(out, "  %7.1f", pct);
      if (isLat(r)) std::fprintf(out, "  %6.2f", r.plugin[i].timeUs - r.raw[i].timeUs);
      if (isLat(r) || row.bytes >= (size_t{1} << 20)) ratioSum += pct, ++ratioRows;
    }
    std::fprintf(out, "\n");
  }
  if (ratioRows > 0)
    std::fprintf(out, "# Avg plugin/raw ratio (%s): %.1f %%\n",
                 isLat(r) ? "all sizes" : "sizes >= 1 MiB", ratioSum / ratioRows);
  std::fprintf(out, "# Data check: every message verified, no mismatch\n");
}

bool writeCsv(const Report& r, const std::string& path, std::string* error) {
  std::ofstream out(path);
  if (!out) {
    *error = "cannot write " + path;
    return false;
  }
  if (r.opts.mode == Mode::kComms)
    return writeCommsCsv(r, out) || (*error = "write error on " + path, false);
  out << "mode,provider,bytes,comms,count,window";
  for (const char* e : {"plugin", "raw"})
    out << ',' << e << "_time_us," << e << "_gbps," << e << "_mmsgs," << e << "_p99_us";
  out << ",ratio_pct\n";
  Row none;
  for (size_t i = 0; i < rowCount(r); ++i) {
    const Row& row = anyRow(r, i);
    out << modeName(r.opts.mode) << ',' << r.provider << ',' << row.bytes << ',' << row.comms << ','
        << row.count << ',' << row.window;
    for (const Row* x :
         {i < r.plugin.size() ? &r.plugin[i] : &none, i < r.raw.size() ? &r.raw[i] : &none}) {
      if (x == &none)
        out << ",,,,";
      else
        out << ',' << csvCell(x->timeUs) << ',' << csvCell(x->gbps) << ',' << csvCell(x->mmsgs)
            << ',' << csvCell(x->p99Us);
    }
    out << ',' << (both(r) ? csvCell(ratio(r, r.plugin[i], r.raw[i])) : "") << '\n';
  }
  return static_cast<bool>(out) || (*error = "write error on " + path, false);
}

bool writeJson(const Report& r, const std::string& path, std::string* error) {
  std::ofstream out(path);
  if (!out) {
    *error = "cannot write " + path;
    return false;
  }
  auto str = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') q += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) q += c;
    }
    return q + "\"";
  };
  auto row = [&](const Row& x) {
    return "{\"time_us\": " + csvCell(x.timeUs) + ", \"gbps\": " + csvCell(x.gbps) +
           ", \"mmsgs\": " + csvCell(x.mmsgs) + ", \"p99_us\": " + csvCell(x.p99Us) + "}";
  };
  out << "{\n  \"mode\": " << str(modeName(r.opts.mode)) << ",\n  \"provider\": " << str(r.provider)
      << ",\n  \"full_check\": " << (r.fullCheck ? "true" : "false");
  if (r.opts.mode == Mode::kRma) out << ",\n  \"rma_op\": " << str(rmaOpName(r.opts.rmaOp));
  if (r.hasPlugin) out << ",\n  \"plugin\": " << str(r.pluginInfo);
  if (r.hasRaw) out << ",\n  \"raw\": " << str(r.rawInfo);
  if (r.opts.mode == Mode::kComms) {
    out << ",\n  \"sides\": [";
    for (size_t i = 0; i < r.sides.size(); ++i)
      out << (i ? ",\n" : "\n") << "    " << commsJsonRow(r.sides[i]);
    out << "\n  ]\n}\n";
    return static_cast<bool>(out) || (*error = "write error on " + path, false);
  }
  out << ",\n  \"rows\": [";
  for (size_t i = 0; i < rowCount(r); ++i) {
    const Row& x = anyRow(r, i);
    out << (i ? ",\n" : "\n") << "    {\"bytes\": " << x.bytes << ", \"comms\": " << x.comms
        << ", \"count\": " << x.count << ", \"window\": " << x.window;
    if (i < r.plugin.size()) out << ", \"plugin\": " << row(r.plugin[i]);
    if (i < r.raw.size()) out << ", \"raw\": " << row(r.raw[i]);
    if (both(r)) out << ", \"ratio_pct\": " << csvCell(ratio(r, r.plugin[i], r.raw[i]));
    out << "}";
  }
  out << "\n  ]\n}\n";
  return static_cast<bool>(out) || (*error = "write error on " + path, false);
}

std::string sizeLabel(size_t bytes) {
  char text[32];
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0)
    std::snprintf(text, sizeof(text), "%zuG", bytes >> 30);
  else if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0)
    std::snprintf(text, sizeof(text), "%zuM", bytes >> 20);
  else if (bytes >= 1024 && bytes % 1024 == 0)
    std::snprintf(text, sizeof(text), "%zuK", bytes >> 10);
  else
    std::snprintf(text, sizeof(text), "%zu", bytes);
  return text;
}

bool writePlot(const Report& r, const std::string& path, std::string* error) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::fprintf(stderr,
                 "fabric-net-perf: --plot %s skipped: gnuplot is not installed "
                 "(apt-get install gnuplot-nox); use --csv or --json for the numbers\n",
                 path.c_str());
    return true;
  }
  // Data: one block per number of comms (msgrate sweeps them; other modes have one), columns
  // bytes, label, then per engine the headline number, the time and the p99.
  std::vector<int> commCounts;
  for (size_t i = 0; i < rowCount(r); ++i) {
    int c = anyRow(r, i).comms;
    if (std::find(commCounts.begin(), commCounts.end(), c) == commCounts.end())
      commCounts.push_back(c);
  }
  std::string data = path + ".dat", script = path + ".gp";
  {
    std::ofstream out(data);
    for (size_t block = 0; block < commCounts.size(); ++block) {
      if (block > 0) out << "\n\n";
      for (size_t i = 0; i < rowCount(r); ++i) {
        const Row& x = anyRow(r, i);
        if (x.comms != commCounts[block]) continue;
        out << x.bytes << ' ' << sizeLabel(x.bytes);
        for (const std::vector<Row>* rows : {&r.plugin, &r.raw}) {
          if (i < rows->size())
            out << ' ' << metric(r, (*rows)[i]) << ' ' << (*rows)[i].timeUs << ' '
                << (*rows)[i].p99Us;
          else
            out << " NaN NaN NaN";
        }
        out << '\n';
      }
    }
    if (!out) {
      *error = "cannot write " + data;
      return false;
    }
  }
  {
    // Two panels on one x axis: the headline number on top, time per message (or the p99 for
    // lat) below on a log scale, plugin solid and raw dashed in the same colour.
    std::ofstream out(script);
    const char* top = isLat(r) ? "median half round trip (us)" : isRate(r) ? "Mmsg/s" : "GB/s";
    const char* bottom = isLat(r)                         ? "p99 half round trip (us)"
                         : r.opts.mode == Mode::kAlltoall ? "time per step (us)"
                                                          : "time per message (us)";
    out << "set terminal pngcairo size 900,760 font ',10'\nset output '" << path << "'\n"
        << "set multiplot layout 2,1 title 'fabric-net-perf " << modeTitle(r.opts) << ", "
        << r.provider << ": plugin (solid) beside raw libfabric (dashed)'\n"
        << "set logscale x 2\nset grid\nset key outside right top\nset xlabel 'message size "
           "(bytes)'\n";
    auto panel = [&](const char* label, int pluginCol, int rawCol, bool logY) {
      out << "set ylabel '" << label << "'\n"
          << (logY ? "set logscale y\n" : "unset logscale y\n") << "plot ";
      bool first = true;
      for (size_t block = 0; block < commCounts.size(); ++block) {
        std::string suffix = isRate(r) ? ", " + std::to_string(commCounts[block]) + " comm" +
                                             (commCounts[block] > 1 ? "s" : "")
                                       : "";
        for (int engine = 0; engine < 2; ++engine) {
          if (engine == 0 ? !r.hasPlugin : !r.hasRaw) continue;
          out << (first ? "" : ", ") << "'" << data << "' index " << block
              << " using 1:" << (engine == 0 ? pluginCol : rawCol)
              << ":xticlabels(2) with linespoints lc " << block + 1 << " dt "
              << (engine == 0 ? 1 : 2) << " pt " << (engine == 0 ? 7 : 6) << " title '"
              << (engine == 0 ? "plugin" : "raw") << suffix << "'";
          first = false;
        }
      }
      out << "\n";
    };
    panel(top, 3, 6, isLat(r));
    if (isLat(r))
      panel(bottom, 5, 8, true);
    else
      panel(bottom, 4, 7, true);
    out << "unset multiplot\n";
    if (!out) {
      *error = "cannot write " + script;
      return false;
    }
  }
  std::string cmd = "gnuplot '" + script + "'";
  if (std::system(cmd.c_str()) != 0) {
    *error = "gnuplot failed on " + script + " (data in " + data + ")";
    return false;
  }
  unlink(data.c_str());
  unlink(script.c_str());
  return true;
}

}  // namespace nnf::perf
