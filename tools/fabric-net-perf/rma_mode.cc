#include "rma_mode.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "rma_plugin_engine.h"
#include "rma_raw_engine.h"
#include "rma_runner.h"

namespace nnf::perf {
namespace {

// The shorter time of two measurements of the same point (bandwidth and latency alike).
void keepBest(const Row& fresh, Row* best) {
  if (best->count == 0 || fresh.timeUs < best->timeUs) *best = fresh;
}

bool sweep(const std::vector<RmaEngine*>& engines, Bootstrap& boot, const Options& opts,
           std::vector<std::vector<Row>>* rows, std::string* error) {
  std::vector<std::unique_ptr<RmaRunner>> runners;
  for (RmaEngine* engine : engines) {
    runners.push_back(std::make_unique<RmaRunner>(*engine, boot, opts));
    if (!runners.back()->setup()) return *error = runners.back()->error(), false;
  }
  std::vector<size_t> sizes = sweepSizes(opts);
  rows->assign(engines.size(), std::vector<Row>());
  bool progress = boot.rank() == 0 && !opts.quiet && isatty(STDERR_FILENO);
  size_t point = 0;
  for (size_t bytes : sizes) {
    if (progress)
      std::fprintf(stderr, "\rrma %s: %zu/%zu (%zu bytes)        ", rmaOpName(opts.rmaOp), ++point,
                   sizes.size(), bytes);
    std::vector<Row> best(engines.size());
    // As runPatterns: engines alternate point by point and round by round.
    for (int round = 0; round < opts.repeat; ++round) {
      for (size_t turn = 0; turn < engines.size(); ++turn) {
        size_t e = round % 2 == 0 ? turn : engines.size() - 1 - turn;
        Row row;
        if (!runners[e]->step(bytes, &row)) {
          if (progress) std::fprintf(stderr, "\n");
          return *error = runners[e]->error(), false;
        }
        keepBest(row, &best[e]);
      }
    }
    for (size_t e = 0; e < engines.size(); ++e) (*rows)[e].push_back(best[e]);
  }
  if (progress) std::fprintf(stderr, "\r%60s\r", "");
  // Everyone finished before any window goes away under a peer's operation.
  if (!boot.barrier()) return *error = boot.error(), false;
  for (auto& runner : runners) {
    runner->release();
    if (!runner->error().empty()) return *error = runner->error(), false;
  }
  return true;
}

}  // namespace

bool runRmaMode(Bootstrap& boot, const Options& opts, const std::string& provider,
                const std::string& pluginPath, Report* report, std::string* error) {
  report->opts = opts;
  report->provider = provider;
  report->fullCheck = opts.fullCheck;
  RmaPluginEngine plugin(pluginPath, opts.dev);
  RmaRawEngine raw(provider);
  std::vector<RmaEngine*> engines;
  bool ok = true;
  if (opts.runPlugin) {
    ok = (plugin.load() && plugin.connect(boot)) || (*error = "plugin: " + plugin.error(), false);
    report->pluginInfo = plugin.description();
    engines.push_back(&plugin);
  }
  if (ok && opts.runRaw) {
    ok = raw.connect(boot) || (*error = raw.error(), false);
    report->rawInfo = raw.description();
    engines.push_back(&raw);
  }
  std::vector<std::vector<Row>> rows;
  ok = ok && sweep(engines, boot, opts, &rows, error);
  // closeColl is collective: every rank is done before any closes.
  ok = ok && (boot.barrier() || (*error = boot.error(), false));
  if (ok && opts.runPlugin && !plugin.close()) ok = false, *error = "plugin: " + plugin.error();
  if (ok && opts.runRaw && !raw.close()) ok = false, *error = raw.error();
  // Nobody exits while another rank is still closing: a rank gone before its peers' closeColl
  // returns is taken there for dead (one WARN).
  ok = ok && (boot.barrier() || (*error = boot.error(), false));
  if (!ok) return false;
  size_t e = 0;
  if (opts.runPlugin) report->hasPlugin = true, report->plugin = rows[e++];
  if (opts.runRaw) report->hasRaw = true, report->raw = rows[e++];
  return true;
}

}  // namespace nnf::perf
