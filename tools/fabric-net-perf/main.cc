// fabric-net-perf: bandwidth, latency, message rate and all-to-all through the NCCL net plugin,
// with a raw-libfabric baseline measured in the same run.
#include <rdma/fabric.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "comms.h"
#include "config/config.h"
#include "load.h"
#include "options.h"
#include "patterns.h"
#include "plugin_engine.h"
#include "raw_engine.h"
#include "report.h"
#include "rma_mode.h"

namespace nnf::perf {
namespace {

// The core names of the providers offering FI_EP_RDM with tagged messages, in libfabric's
// order ("tcp" for "tcp;ofi_rxm"). Asked in a child process so that libfabric is first
// initialised in the ranks, after fork.
std::vector<std::string> availableProviders() {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    fi_info* list = nullptr;
    std::string names;
    if (fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &list) == 0) {
      for (fi_info* i = list; i != nullptr; i = i->next) {
        std::string name = i->fabric_attr->prov_name;
        names += name.substr(0, name.find(';')) + "\n";
      }
      fi_freeinfo(list);
    }
    fi_freeinfo(hints);
    ssize_t unused = write(fds[1], names.data(), names.size());
    (void)unused;
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[256];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, n);
  close(fds[0]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  std::vector<std::string> names;
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
       start = end + 1) {
    std::string name = text.substr(start, end - start);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

// What the plugin would pick by default: efa when present, else the first one, never `sockets`
// (orders of magnitude slower than anything else).
std::string defaultProvider(const std::vector<std::string>& available) {
  if (std::find(available.begin(), available.end(), "efa") != available.end()) return "efa";
  for (const std::string& name : available)
    if (name != "sockets") return name;
  return "";
}

// Rank 0's table on stdout, then the files the options ask for; the exit status of the run.
int writeResults(const Report& report, const Options& opts) {
  std::string error;
  printTable(report, stdout);
  std::fflush(stdout);
  bool ok = true;
  if (!opts.csvPath.empty() && !writeCsv(report, opts.csvPath, &error)) ok = false;
  if (ok && !opts.jsonPath.empty() && !writeJson(report, opts.jsonPath, &error)) ok = false;
  if (ok && !opts.plotPath.empty() && !writePlot(report, opts.plotPath, &error)) ok = false;
  if (!ok) std::fprintf(stderr, "fabric-net-perf: %s\n", error.c_str());
  return ok ? 0 : 1;
}

// How a rank ends after its run: 1 with the error, 0 for the ranks that print nothing (with a
// line on two hosts, where the results appear on the other one), -1 for rank 0 to go on.
int rankExit(const Bootstrap& boot, const Options& opts, bool ok, const std::string& error) {
  if (!ok) {
    std::fprintf(stderr, "fabric-net-perf: rank %d: %s\n", boot.rank(), error.c_str());
    return 1;
  }
  if (boot.rank() == 0) return -1;
  if (opts.twoHosts())
    std::fprintf(stderr, "fabric-net-perf: done; the listening side prints the results\n");
  return 0;
}

// The comms mode: the plugin alone, driven by comms.cc instead of the patterns.
int commsMain(Bootstrap& boot, const Options& opts, const std::string& provider,
              const std::string& pluginPath) {
  setLogRank(boot.rank());
  Report report;
  report.opts = opts;
  report.provider = provider;
  report.fullCheck = true;
  report.hasPlugin = true;
  std::string error;
  PluginEngine plugin(pluginPath, opts.dev);
  bool ok = plugin.load() || (error = "plugin: " + plugin.error(), false);
  report.pluginInfo = plugin.description() + " (" + pluginPath + ")";
  ok = ok && runComms(plugin, boot, opts, &report.sides, &error);
  if (int status = rankExit(boot, opts, ok, error); status >= 0) return status;
  return writeResults(report, opts);
}

// The rma mode: the plugin's RMA table beside raw libfabric RMA (rma_mode.h).
int rmaMain(Bootstrap& boot, const Options& opts, const std::string& provider,
            const std::string& pluginPath) {
  setLogRank(boot.rank());
  Report report;
  std::string error;
  if (!runRmaMode(boot, opts, provider, pluginPath, &report, &error)) {
    std::fprintf(stderr, "fabric-net-perf: rank %d: %s\n", boot.rank(), error.c_str());
    return 1;
  }
  return boot.rank() == 0 ? writeResults(report, opts) : 0;
}

int rankMain(Bootstrap& boot, const Options& opts, const std::string& provider,
             const std::string& pluginPath) {
  if (opts.mode == Mode::kComms) return commsMain(boot, opts, provider, pluginPath);
  if (opts.mode == Mode::kRma) return rmaMain(boot, opts, provider, pluginPath);
  setLogRank(boot.rank());
  Report report;
  report.opts = opts;
  report.provider = provider;
  report.fullCheck = opts.fullCheck;
  std::string error;
  // Both engines live through the whole sweep and take turns point by point.
  RawEngine raw(provider, opts.rawRma ? RawProtocol::kRma : RawProtocol::kTagged);
  PluginEngine plugin(pluginPath, opts.dev);
  std::vector<Engine*> engines;
  bool ok = true;
  if (opts.runPlugin) {
    ok = (plugin.load() && plugin.connect(boot, commsFor(opts))) ||
         (error = "plugin: " + plugin.error(), false);
    report.pluginInfo = plugin.description() + " (" + pluginPath + ")";
    engines.push_back(&plugin);
  }
  if (ok && opts.runRaw) {
    ok = raw.connect(boot, commsFor(opts)) || (error = raw.error(), false);
    report.rawInfo = raw.description();
    engines.push_back(&raw);
  }
  std::vector<std::vector<Row>> rows;
  ok = ok && runPatterns(engines, boot, opts, &rows, &error);
  // Everyone finished before anyone closes, so no peer sees a comm vanish under it.
  ok = ok && (boot.barrier() || (error = boot.error(), false));
  if (ok && opts.runPlugin && !plugin.close()) ok = false, error = "plugin: " + plugin.error();
  if (ok && opts.runRaw && !raw.close()) ok = false, error = raw.error();
  if (int status = rankExit(boot, opts, ok, error); status >= 0) return status;
  size_t e = 0;
  if (opts.runPlugin) report.hasPlugin = true, report.plugin = rows[e++];
  if (opts.runRaw) report.hasRaw = true, report.raw = rows[e++];
  return writeResults(report, opts);
}

int main(int argc, char** argv) {
  Options opts;
  std::string error;
  bool help = false;
  if (!parseOptions(argc, argv, &opts, &error, &help)) {
    std::fprintf(stderr, "fabric-net-perf: %s\n", error.c_str());
    return 2;
  }
  if (help) {
    printUsage(argv[0]);
    return 0;
  }
  // The plugin would refuse a bad NCCL_FABRIC_* value in every rank: say it once, up front.
  if (opts.runPlugin) {
    try {
      config::Config::load();
    } catch (const config::ConfigError& e) {
      std::fprintf(stderr, "fabric-net-perf: invalid configuration: %s\n", e.what());
      return 1;
    }
  }
  // One provider for both engines, so that the ratio compares like with like. Messages name
  // the setting the user chose it with.
  std::string provider = opts.provider;
  std::string source = "--provider";
  for (const char* variable : {"FI_PROVIDER", "NCCL_FABRIC_PROVIDER"}) {
    const char* value = std::getenv(variable);
    if (!provider.empty() || value == nullptr || *value == '\0') continue;
    provider = value;
    source = variable;
  }
  std::vector<std::string> available = availableProviders();
  if (provider.empty()) provider = defaultProvider(available);
  if (provider.empty()) {
    std::fprintf(stderr,
                 "fabric-net-perf: libfabric offers no provider with FI_EP_RDM and "
                 "tagged messages here (see fi_info -t FI_EP_RDM -c FI_TAGGED)\n");
    return 1;
  }
  std::string core = provider.substr(0, provider.find(';'));
  if (std::find(available.begin(), available.end(), core) == available.end()) {
    std::string names;
    for (const std::string& name : available) names += (names.empty() ? "" : ", ") + name;
    std::fprintf(stderr,
                 "fabric-net-perf: %s=%s: no such libfabric provider with FI_EP_RDM and tagged "
                 "messages here (available: %s)\n",
                 source.c_str(), provider.c_str(), names.empty() ? "none" : names.c_str());
    return 1;
  }
  if (provider == "sockets")
    std::fprintf(stderr,
                 "fabric-net-perf: warning: the sockets provider takes milliseconds per "
                 "message; its numbers say nothing about the plugin\n");
  // The plugin reads NCCL_FABRIC_PROVIDER itself; FI_PROVIDER narrows libfabric only when the
  // choice came from the command line, FI_PROVIDER or the default.
  if (source != "NCCL_FABRIC_PROVIDER") setenv("FI_PROVIDER", provider.c_str(), 1);
  if (provider.rfind("tcp", 0) == 0 && !opts.twoHosts()) setenv("FI_TCP_IFACE", "lo", 0);

  std::string pluginPath =
      opts.pluginPath.empty() ? tools::defaultPluginPath(NNF_PLUGIN_PATH) : opts.pluginPath;
  RankBody body = [&](Bootstrap& boot) { return rankMain(boot, opts, provider, pluginPath); };
  // Started before the ranks, so that both engines run under it from their first message.
  BusyLoad load;
  if (!load.start(opts.load)) return 1;
  if (opts.twoHosts())
    return runTwoHosts(opts.listen, opts.connectHost, opts.port, agreementKey(opts), body);
  bool pin = opts.pinned() && enoughCpusToPin(opts.numRanks());
  return runLocalRanks(opts.numRanks(), pin, body);
}

}  // namespace
}  // namespace nnf::perf

int main(int argc, char** argv) {
  return nnf::perf::main(argc, argv);
}
