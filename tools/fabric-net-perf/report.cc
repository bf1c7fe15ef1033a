#include "report.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace nnf::perf {
namespace {

bool isLat(const Report& r) {
  return r.opts.mode == Mode::kLat;
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

// Plugin as a percentage of raw: higher is better for every mode (latency inverted).
double ratio(const Report& r, const Row& p, const Row& raw) {
  double a = metric(r, p), b = metric(r, raw);
  if (a <= 0 || b <= 0) return 0;
  return isLat(r) ? 100.0 * b / a : 100.0 * a / b;
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

}  // namespace

void printTable(const Report& r, FILE* out) {
  const char* mode = modeName(r.opts.mode);
  std::fprintf(out, "# fabric-net-perf %s, provider %s, %s check\n", mode, r.provider.c_str(),
               r.fullCheck ? "full" : "first/last bytes");
  if (r.hasPlugin) std::fprintf(out, "# plugin: %s\n", r.pluginInfo.c_str());
  if (r.hasRaw) std::fprintf(out, "# raw:    %s\n", r.rawInfo.c_str());
  if (r.opts.mode == Mode::kAlltoall)
    std::fprintf(out,
                 "# alltoall: %d ranks, each peer gets 0..2x size (uneven); time per step, "
                 "GB/s sent per rank\n",
                 anyRow(r, 0).comms);
  if (r.opts.mode == Mode::kBibw) std::fprintf(out, "# bibw: GB/s of both directions together\n");
  if (isLat(r)) std::fprintf(out, "# lat: half round trip, ratio = raw median / plugin median\n");
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
  if (r.hasPlugin) out << ",\n  \"plugin\": " << str(r.pluginInfo);
  if (r.hasRaw) out << ",\n  \"raw\": " << str(r.rawInfo);
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

bool writePlot(const Report& r, const std::string& path, std::string* error) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::fprintf(stderr,
                 "fabric-net-perf: --plot %s skipped: gnuplot is not installed "
                 "(apt-get install gnuplot-nox); use --csv or --json for the numbers\n",
                 path.c_str());
    return true;
  }
  std::string data = path + ".dat", script = path + ".gp";
  {
    std::ofstream out(data);
    for (size_t i = 0; i < rowCount(r); ++i) {
      const Row& x = anyRow(r, i);
      // msgrate: one line per size, at the largest number of comms.
      if (isRate(r) && x.comms != r.opts.comms) continue;
      out << x.bytes << ' ' << x.comms << ' ' << (i < r.plugin.size() ? metric(r, r.plugin[i]) : 0)
          << ' ' << (i < r.raw.size() ? metric(r, r.raw[i]) : 0) << '\n';
    }
  }
  {
    std::ofstream out(script);
    const char* y = isLat(r) ? "median half round trip (us)" : isRate(r) ? "Mmsg/s" : "GB/s";
    out << "set terminal pngcairo size 900,560\nset output '" << path << "'\n"
        << "set logscale x 2\nset xlabel 'message size (bytes)'\nset ylabel '" << y << "'\n"
        << "set title 'fabric-net-perf " << modeName(r.opts.mode) << " (" << r.provider
        << ")'\nset key left top\nset grid\nplot ";
    bool first = true;
    if (r.hasPlugin)
      out << "'" << data << "' using 1:3 with linespoints title 'plugin'", first = false;
    if (r.hasRaw)
      out << (first ? "" : ", ") << "'" << data << "' using 1:4 with linespoints title 'raw'";
    out << "\n";
  }
  std::string cmd = "gnuplot '" + script + "'";
  if (std::system(cmd.c_str()) != 0) {
    *error = "gnuplot failed on " + script;
    return false;
  }
  unlink(data.c_str());
  unlink(script.c_str());
  return true;
}

}  // namespace nnf::perf
