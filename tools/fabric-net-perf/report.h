// Output: the nccl-tests style table, CSV, JSON and an optional gnuplot chart (the comms mode:
// one row per side instead of one per size, and no chart).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "comms.h"
#include "options.h"
#include "patterns.h"

namespace nnf::perf {

struct Report {
  Options opts;
  std::string provider;
  std::string pluginInfo, rawInfo;  // one line each, for the header
  bool hasPlugin = false, hasRaw = false;
  std::vector<Row> plugin, raw;  // same order; either may be empty
  std::vector<CommsSide> sides;  // comms mode: receiver, then sender
  bool fullCheck = false;
};

void printTable(const Report& report, FILE* out);
bool writeCsv(const Report& report, const std::string& path, std::string* error);
bool writeJson(const Report& report, const std::string& path, std::string* error);
// Returns false only on a failure worth an exit code; a missing gnuplot is reported on stderr.
bool writePlot(const Report& report, const std::string& path, std::string* error);

}  // namespace nnf::perf
