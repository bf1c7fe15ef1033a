#include "options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nnf::perf {
namespace {

// Mode defaults keep the README's main job (bw) and every other mode to a few seconds.
struct ModeDefaults {
  size_t minBytes, maxBytes;
  double factor;
};

ModeDefaults defaultsFor(Mode mode) {
  switch (mode) {
    case Mode::kBw:
    case Mode::kBibw:
      return {8, 16u << 20, 4};
    case Mode::kLat:
      return {8, 64u << 10, 4};
    case Mode::kMsgrate:
      return {8, 64u << 10, 8};
    case Mode::kAlltoall:
      return {1u << 10, 4u << 20, 4};
    case Mode::kComms:
      return {64, 64, 2};  // one size: -b (or -e) sets it
    case Mode::kRma:
      return {4u << 10, 16u << 20, 4};  // put-signal: the lat sweep (parseOptions)
  }
  return {8, 16u << 20, 4};
}

bool parseSize(const char* text, size_t* out) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || value < 0) return false;
  double scale = 1;
  switch (*end) {
    case 'k':
    case 'K':
      scale = 1024.0;
      ++end;
      break;
    case 'm':
    case 'M':
      scale = 1024.0 * 1024;
      ++end;
      break;
    case 'g':
    case 'G':
      scale = 1024.0 * 1024 * 1024;
      ++end;
      break;
    default:
      break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  double bytes = value * scale;
  // isend takes an int size.
  if (bytes > 2147483647.0) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

bool parseInt(const char* text, int lo, int hi, int* out) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < lo || value > hi) return false;
  *out = static_cast<int>(value);
  return true;
}

// comms: the defaults and the bounds of --comms, and the most buffer memory one side may take
// (--comms times the message size rounded up to 64 bytes).
constexpr int kDefaultOpenComms = 10000;
constexpr int kMaxOpenComms = 1000000;
constexpr size_t kMaxCommsBuffer = size_t{4} << 30;

// The comms mode measures one message size on the plugin alone: refuses what would be silently
// ignored, and turns -b / -e into that one size.
bool checkCommsOptions(Options* opts, std::string* error) {
  if (opts->iters > 0) {
    *error = "comms: -n counts iterations; the number of comms is --comms N";
    return false;
  }
  if (!opts->runPlugin || opts->rawRma) {
    *error = "comms: measures the plugin only (no --raw-only, no --raw)";
    return false;
  }
  if (!opts->plotPath.empty()) {
    *error = "comms: nothing to plot (use --csv or --json)";
    return false;
  }
  if (opts->minSet && opts->maxSet && opts->minBytes != opts->maxBytes) {
    *error = "comms: one message size (-b SIZE)";
    return false;
  }
  size_t bytes = opts->minSet ? opts->minBytes : opts->maxSet ? opts->maxBytes : 64;
  size_t stride = std::max<size_t>(64, (bytes + 63) & ~size_t{63});
  if (stride * static_cast<size_t>(opts->comms) > kMaxCommsBuffer) {
    *error = "comms: " + std::to_string(opts->comms) + " messages of " + std::to_string(bytes) +
             " bytes need more than 4 GiB of buffers per side";
    return false;
  }
  opts->minBytes = opts->maxBytes = bytes;
  opts->minSet = opts->maxSet = true;
  return true;
}

// rma: local ranks only, 2..8 of them, and none of the two-sided modes' options.
bool checkRmaOptions(const Options& opts, std::string* error) {
  if (opts.twoHosts()) {
    *error = "rma: local ranks only (no --listen, no --connect)";
    return false;
  }
  if (opts.ranks > 8) {
    *error = "rma: --ranks " + std::to_string(opts.ranks) + " is more than 8";
    return false;
  }
  if (opts.rawRma) {
    *error = "rma: the raw baseline is raw libfabric RMA already (no --raw)";
    return false;
  }
  return true;
}

}  // namespace

const char* modeName(Mode mode) {
  switch (mode) {
    case Mode::kBw:
      return "bw";
    case Mode::kBibw:
      return "bibw";
    case Mode::kLat:
      return "lat";
    case Mode::kMsgrate:
      return "msgrate";
    case Mode::kAlltoall:
      return "alltoall";
    case Mode::kComms:
      return "comms";
    case Mode::kRma:
      return "rma";
  }
  return "?";
}

const char* rmaOpName(RmaOp op) {
  switch (op) {
    case RmaOp::kPut:
      return "put";
    case RmaOp::kPutSignal:
      return "put-signal";
    case RmaOp::kGet:
      return "get";
  }
  return "?";
}

const char* orderName(Order order) {
  switch (order) {
    case Order::kFree:
      return "free";
    case Order::kAhead:
      return "ahead";
    case Order::kStep:
      return "step";
    case Order::kBehind:
      return "behind";
  }
  return "?";
}

void printUsage(const char* argv0) {
  std::printf(
      "Usage: %s [MODE] [options]\n"
      "Measures the NCCL net plugin (libnccl-net-fabric.so) driven as NCCL drives it, beside\n"
      "the same pattern on raw libfabric (FI_EP_RDM, tagged) in the same run.\n\n"
      "Modes:\n"
      "  bw        one direction, 32 messages in flight (default)\n"
      "  bibw      both directions at once\n"
      "  lat       ping-pong; median and p99 of half the round trip\n"
      "  msgrate   small messages over 1, 2, 4 .. --comms comms at once\n"
      "  alltoall  every rank of a local group sends to every other at once, uneven sizes\n"
      "  comms     --comms N comms open at once (plugin only): set-up, one message on each,\n"
      "            close; seconds, memory and file descriptors per side\n"
      "  rma OP    the plugin's one-sided RMA table beside raw libfabric RMA, --ranks local\n"
      "            ranks (2..8, default 2; rank 0 to rank 1 for 2, all-to-all for more):\n"
      "            put (fi_write), get (fi_read): GB/s with --window operations in flight\n"
      "            per peer; put-signal (fi_writedata, the target reading its CQ): latency,\n"
      "            the target waiting on its signal (2 ranks: half the round trip; more:\n"
      "            one all-to-all step)\n\n"
      "Options:\n"
      "  -b SIZE           smallest message (K/M/G suffixes); comms: the message size\n"
      "                    (default 64)\n"
      "  -e SIZE           largest message\n"
      "  -f FACTOR         size multiplier between steps\n"
      "  -n N              iterations per size (default: enough for --time)\n"
      "  --time MS         length of one measurement without -n (default 100 ms; lat counts\n"
      "                    round trips instead)\n"
      "  -w N              warm-up iterations per size\n"
      "  --repeat N        measure every point N times, engines alternating; keep the best\n"
      "  --window N        messages in flight per comm (1..32, default 32)\n"
      "  --comms N         msgrate: most comms at once (1..64, default 4); comms: comms open\n"
      "                    at once (1..1000000, default 10000)\n"
      "  --ranks N         alltoall: ranks in the local group (2..16, default 4); rma: 2..8\n"
      "                    (default 2)\n"
      "  --dev N           plugin device (default 0)\n"
      "  --provider NAME   libfabric provider for plugin and raw (sets FI_PROVIDER)\n"
      "  --plugin PATH     plugin library (default: $NNF_PLUGIN, else the one installed\n"
      "                    beside this tool (../lib), else the built one)\n"
      "  --plugin-only     skip the raw libfabric baseline\n"
      "  --raw-only        run only the raw libfabric baseline\n"
      "  --raw PROTOCOL    the raw baseline's protocol: tagged (fi_tsend/fi_trecv, default)\n"
      "                    or rma (receiver-driven: a clear-to-send per receive, then\n"
      "                    fi_writedata with 4 bytes of remote CQ data)\n"
      "  --check           verify every byte (default: first and last bytes of each message)\n"
      "  --csv FILE        also write the results as CSV\n"
      "  --json FILE       also write the results as JSON\n"
      "  --plot FILE.png   plot with gnuplot (when installed)\n"
      "  --listen [PORT]   two hosts: wait for the peer on PORT (default 18515); prints results\n"
      "  --connect H:PORT  two hosts: connect to the listening side\n"
      "  --pin, --no-pin   local ranks on distinct CPUs or not (default: pinned for lat only)\n"
      "  --load N          N busy-looping processes beside the ranks (0..64; each side of a\n"
      "                    two-host run starts its own)\n"
      "  --order ORDER     bw, msgrate: rounds of --window messages, each ended by the\n"
      "                    acknowledgement; the receiver posts a round's receives before the\n"
      "                    sender starts it (ahead), as the sender starts (step), or once the\n"
      "                    sender has posted the round's sends (behind)\n"
      "  --phases          with --order: per measured point, each rank's mean time a round\n"
      "                    spends moving its messages and in the acknowledgement (posting the\n"
      "                    next receives included), one CSV line per rank on stderr\n"
      "                    (phases,engine,rank,dir,bytes,rounds,stream_us,ack_us): which side\n"
      "                    bounds the round\n"
      "  --timeline MS     bw, bibw: every MS ms, the bytes each engine's messages moved\n"
      "                    and their GB/s on stderr, one CSV line per direction\n"
      "                    (timeline,engine,rank,dir,t_s,interval_s,bytes,gbps; t_s counted\n"
      "                    from the tool's start): bandwidth over a long single-size run\n"
      "  -q, --quiet       no progress on stderr\n"
      "  -h, --help        this text\n\n"
      "Local runs on tcp use FI_TCP_IFACE=lo unless it is set.\n",
      argv0);
}

bool parseOptions(int argc, char** argv, Options* out, std::string* error, bool* help) {
  Options opts;
  *help = false;
  int i = 1;
  if (i < argc && argv[i][0] != '-') {
    std::string mode = argv[i++];
    if (mode == "bw")
      opts.mode = Mode::kBw;
    else if (mode == "bibw")
      opts.mode = Mode::kBibw;
    else if (mode == "lat")
      opts.mode = Mode::kLat;
    else if (mode == "msgrate")
      opts.mode = Mode::kMsgrate;
    else if (mode == "alltoall")
      opts.mode = Mode::kAlltoall;
    else if (mode == "comms")
      opts.mode = Mode::kComms;
    else if (mode == "rma")
      opts.mode = Mode::kRma;
    else {
      *error = "unknown mode '" + mode + "' (bw, bibw, lat, msgrate, alltoall, comms, rma)";
      return false;
    }
  }
  if (opts.mode == Mode::kRma) {
    std::string op = i < argc ? argv[i] : "";
    if (op == "put")
      opts.rmaOp = RmaOp::kPut;
    else if (op == "put-signal")
      opts.rmaOp = RmaOp::kPutSignal;
    else if (op == "get")
      opts.rmaOp = RmaOp::kGet;
    else {
      *error = "rma: expected an operation (put, put-signal, get)" +
               (op.empty() ? std::string() : ", got '" + op + "'");
      return false;
    }
    ++i;
    opts.ranks = 2;
  }
  // The comms mode opens thousands of comms at once and measures the plugin alone.
  bool commsMode = opts.mode == Mode::kComms;
  if (commsMode) opts.comms = kDefaultOpenComms, opts.runRaw = false;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char** v) {
      if (i + 1 >= argc) {
        *error = arg + " needs a value";
        return false;
      }
      *v = argv[++i];
      return true;
    };
    const char* v = nullptr;
    if (arg == "-h" || arg == "--help") {
      *help = true;
      return true;
    } else if (arg == "-b" || arg == "-e") {
      if (!value(&v)) return false;
      size_t bytes = 0;
      if (!parseSize(v, &bytes)) {
        *error = arg + ": '" + v + "' is not a size in 0..2G-1 (bytes, K, M or G)";
        return false;
      }
      if (arg == "-b")
        opts.minBytes = bytes, opts.minSet = true;
      else
        opts.maxBytes = bytes, opts.maxSet = true;
    } else if (arg == "-f") {
      if (!value(&v)) return false;
      opts.factor = std::atof(v);
      if (opts.factor <= 1.0) {
        *error = "-f: factor must be greater than 1";
        return false;
      }
    } else if (arg == "-n" || arg == "-w" || arg == "--window" || arg == "--comms" ||
               arg == "--repeat" || arg == "--ranks" || arg == "--dev" || arg == "--time") {
      if (!value(&v)) return false;
      struct Range {
        int lo, hi;
        int* out;
      };
      Range range = arg == "-n"         ? Range{1, 100000000, &opts.iters}
                    : arg == "-w"       ? Range{0, 100000000, &opts.warmup}
                    : arg == "--repeat" ? Range{1, 100, &opts.repeat}
                    : arg == "--time"   ? Range{1, 600000, &opts.timeMs}
                    : arg == "--window" ? Range{1, 32, &opts.window}
                    : arg == "--comms"  ? Range{1, commsMode ? kMaxOpenComms : 64, &opts.comms}
                    : arg == "--ranks"  ? Range{2, 16, &opts.ranks}
                                        : Range{0, 1023, &opts.dev};
      if (!parseInt(v, range.lo, range.hi, range.out)) {
        *error = arg + ": '" + v + "' is not an integer in " + std::to_string(range.lo) + ".." +
                 std::to_string(range.hi);
        return false;
      }
    } else if (arg == "--provider") {
      if (!value(&v)) return false;
      opts.provider = v;
    } else if (arg == "--plugin") {
      if (!value(&v)) return false;
      opts.pluginPath = v;
    } else if (arg == "--plugin-only") {
      opts.runRaw = false;
    } else if (arg == "--raw-only") {
      opts.runPlugin = false;
    } else if (arg == "--raw") {
      if (!value(&v)) return false;
      std::string protocol = v;
      if (protocol != "tagged" && protocol != "rma") {
        *error = "--raw: '" + protocol + "' is not a protocol (tagged, rma)";
        return false;
      }
      opts.rawRma = protocol == "rma";
    } else if (arg == "--check") {
      opts.fullCheck = true;
    } else if (arg == "--csv" || arg == "--json" || arg == "--plot") {
      if (!value(&v)) return false;
      (arg == "--csv" ? opts.csvPath : arg == "--json" ? opts.jsonPath : opts.plotPath) = v;
    } else if (arg == "--listen") {
      opts.listen = true;
      // The port is optional: take the next word only when it is a number.
      if (i + 1 < argc && argv[i + 1][0] != '-' && !parseInt(argv[i + 1], 1, 65535, &opts.port)) {
        *error = std::string("--listen: '") + argv[i + 1] + "' is not a port in 1..65535";
        return false;
      }
      if (i + 1 < argc && argv[i + 1][0] != '-') ++i;
    } else if (arg == "--connect") {
      if (!value(&v)) return false;
      std::string hp = v;
      size_t colon = hp.rfind(':');
      if (colon == std::string::npos || colon == 0 ||
          !parseInt(hp.substr(colon + 1).c_str(), 1, 65535, &opts.port)) {
        *error = "--connect: expected HOST:PORT with PORT in 1..65535, got '" + hp + "'";
        return false;
      }
      opts.connectHost = hp.substr(0, colon);
    } else if (arg == "--load") {
      if (!value(&v)) return false;
      if (!parseInt(v, 0, 64, &opts.load)) {
        *error = "--load: '" + std::string(v) + "' is not an integer in 0..64";
        return false;
      }
    } else if (arg == "--order") {
      if (!value(&v)) return false;
      std::string order = v;
      if (order == "ahead") {
        opts.order = Order::kAhead;
      } else if (order == "step") {
        opts.order = Order::kStep;
      } else if (order == "behind") {
        opts.order = Order::kBehind;
      } else {
        *error = "--order: '" + order + "' is not an order (ahead, step, behind)";
        return false;
      }
    } else if (arg == "--timeline") {
      if (!value(&v)) return false;
      if (!parseInt(v, 1, 600000, &opts.timelineMs)) {
        *error = "--timeline: '" + std::string(v) + "' is not a period in 1..600000 ms";
        return false;
      }
    } else if (arg == "--phases") {
      opts.phases = true;
    } else if (arg == "--pin" || arg == "--no-pin") {
      opts.pin = arg == "--pin" ? 1 : 0;
    } else if (arg == "-q" || arg == "--quiet") {
      opts.quiet = true;
    } else {
      *error = "unknown option '" + arg + "' (see --help)";
      return false;
    }
  }
  if (commsMode && !checkCommsOptions(&opts, error)) return false;
  if (opts.mode == Mode::kRma && !checkRmaOptions(opts, error)) return false;
  if (opts.order != Order::kFree && opts.mode != Mode::kBw && opts.mode != Mode::kMsgrate) {
    *error = "--order: bw and msgrate only (one rank sends, the other receives)";
    return false;
  }
  if (opts.phases && opts.order == Order::kFree) {
    *error = "--phases: with --order only (the phases are those of a round)";
    return false;
  }
  if (opts.timelineMs > 0 && opts.mode != Mode::kBw && opts.mode != Mode::kBibw) {
    *error = "--timeline: bw and bibw only (bytes moved over time in a stream)";
    return false;
  }
  if (!opts.runPlugin && !opts.runRaw) {
    *error = "--plugin-only and --raw-only exclude each other";
    return false;
  }
  if (opts.listen && !opts.connectHost.empty()) {
    *error = "--listen and --connect exclude each other";
    return false;
  }
  ModeDefaults d = defaultsFor(opts.latency() ? Mode::kLat : opts.mode);
  if (!opts.minSet) opts.minBytes = d.minBytes;
  if (!opts.maxSet) opts.maxBytes = opts.minSet ? std::max(opts.minBytes, d.maxBytes) : d.maxBytes;
  if (opts.minSet && !opts.maxSet && opts.minBytes > d.maxBytes) opts.maxBytes = opts.minBytes;
  if (opts.factor == 0) opts.factor = d.factor;
  if (opts.maxBytes < opts.minBytes) {
    *error = "-e must not be smaller than -b";
    return false;
  }
  *out = opts;
  return true;
}

std::vector<size_t> sweepSizes(const Options& opts) {
  std::vector<size_t> sizes;
  size_t bytes = opts.minBytes;
  if (bytes == 0) {
    // Zero-byte messages are legal and frequent in NCCL; sweep on from one byte.
    sizes.push_back(0);
    bytes = 1;
  }
  while (bytes <= opts.maxBytes) {
    sizes.push_back(bytes);
    size_t next = static_cast<size_t>(static_cast<double>(bytes) * opts.factor);
    bytes = next > bytes ? next : bytes + 1;
  }
  if (sizes.empty() || sizes.back() != opts.maxBytes) sizes.push_back(opts.maxBytes);
  return sizes;
}

int itersFor(const Options& opts, size_t bytes) {
  if (opts.iters > 0) return opts.iters;
  double b = static_cast<double>(std::max<size_t>(bytes, 64));
  auto clamp = [](double v, int lo, int hi) {
    return static_cast<int>(std::min<double>(hi, std::max<double>(lo, v)));
  };
  switch (opts.latency() ? Mode::kLat : opts.mode) {
    case Mode::kBw:
    case Mode::kBibw:
    case Mode::kRma:
      return clamp(128.0 * 1024 * 1024 / b, 24, 1000);
    case Mode::kMsgrate:
      return clamp(64.0 * 1024 * 1024 / b, 64, 10000);
    case Mode::kLat:
      return clamp(256.0 * 1024 * 1024 / b, 200, 10000);
    case Mode::kAlltoall:
      return clamp(64.0 * 1024 * 1024 / b, 10, 200);
    case Mode::kComms:
      return 1;  // one message per comm
  }
  return 100;
}

int warmupFor(const Options& opts, size_t bytes) {
  if (opts.warmup >= 0) return opts.warmup;
  return std::max(4, itersFor(opts, bytes) / 10);
}

std::string agreementKey(const Options& opts) {
  char key[256];
  std::snprintf(key, sizeof(key),
                "%s b=%zu e=%zu f=%g n=%d w=%d t=%d rep=%d win=%d c=%d p=%d r=%d chk=%d",
                modeName(opts.mode), opts.minBytes, opts.maxBytes, opts.factor, opts.iters,
                opts.warmup, opts.timeMs, opts.repeat, opts.window, opts.comms, opts.runPlugin,
                opts.runRaw, opts.fullCheck);
  // Appended only when set, so that the key of a default run stays what it was. The load is
  // each side's own.
  std::string agreed = key;
  if (opts.rawRma) agreed += " raw=rma";
  if (opts.order != Order::kFree) agreed += std::string(" order=") + orderName(opts.order);
  if (opts.mode == Mode::kRma) agreed += std::string(" rma=") + rmaOpName(opts.rmaOp);
  return agreed;
}

}  // namespace nnf::perf
