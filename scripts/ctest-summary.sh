#!/usr/bin/env bash
# Sums ctest JUnit results (ctest --output-junit FILE) into one honest closing line:
#   tests: N passed, N failed, N skipped
# listing above it every failed test, and every skipped test once with the reason it gave
# (GTEST_SKIP's message) and the runs that skipped it. A run is named after its file.
#
#   scripts/ctest-summary.sh build-ci/*.xml
# Exit status: 0 when nothing failed, 1 otherwise, 2 when no result file was given.
set -euo pipefail
(($#)) || { echo "tests: no ctest results (no ctest run finished)"; exit 2; }

awk '
function unescape(s) {
  gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "\047", s)
  gsub(/&amp;/, "\\&", s)
  return s
}
function attribute(line, key,    at) {
  if (!match(line, key "=\"[^\"]*\"")) return ""
  return substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 3)
}
function finish() {
  if (!open) return
  open = 0
  if (status == "run" && !failed) { passed++; return }
  if (skipped || status == "disabled") {
    skips++
    if (reason == "") reason = (status == "disabled" ? "disabled" : "no reason given")
    key = name " -- " reason
    if (!(key in runs)) { order[++keys] = key; runs[key] = run }
    else if (index(", " runs[key] ", ", ", " run ", ") == 0) runs[key] = runs[key] ", " run
    return
  }
  failures++
  failedList[++failedCount] = run ": " name
}
FNR == 1 {
  finish()
  run = FILENAME; sub(/.*\//, "", run); sub(/\.xml$/, "", run)
}
/<testcase / {
  finish()
  open = 1; failed = 0; skipped = 0; reason = ""; wantReason = 0
  name = unescape(attribute($0, "name")); sub(/  # GetParam.*/, "", name)
  status = attribute($0, "status")
  next
}
open && /<skipped/ { skipped = 1 }
open && /<failure/ { failed = 1 }
open && wantReason { reason = unescape($0); wantReason = 0 }
open && /: Skipped$/ { wantReason = 1 }
open && /<\/testcase>/ { finish() }
END {
  finish()
  if (keys) {
    print "skipped tests (" skips " skips, " keys " distinct):"
    for (i = 1; i <= keys; i++) printf "  %s [%s]\n", order[i], runs[order[i]]
  }
  if (failedCount) {
    print "failed tests:"
    for (i = 1; i <= failedCount; i++) print "  " failedList[i]
  }
  printf "tests: %d passed, %d failed, %d skipped\n", passed, failures, skips
  exit failures > 0
}' "$@"
