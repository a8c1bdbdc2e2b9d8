#!/usr/bin/env bash
# Installs what is missing, builds, runs the whole test suite through CTest (every benchmark's
# smoke run among it), builds the unit tests and the fuzz targets again under AddressSanitizer +
# UndefinedBehaviorSanitizer (scripts/sanitizer_build.sh), runs those tests, then runs every fuzz
# target for 8 s. Prints each stage's time as it ends, and at the end fails when the whole took
# longer than CI's budget (tests/ci_budget.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
times=$(mktemp)
trap 'rm -f "$times"' EXIT

# Runs a stage (its name, then its command) and records its wall seconds.
stage() {
  local name=$1 start=$SECONDS
  shift
  echo "--- $name"
  "$@"
  printf '%s\t%d\n' "$name" $((SECONDS - start)) >>"$times"
  echo "--- $name: $((SECONDS - start)) s"
}

stage "install" bash scripts/setup.sh --test
stage "Release build" bash scripts/build.sh
# Two at a time; the timing tests and the benchmarks' smoke runs run alone (RUN_SERIAL).
stage "tests and benchmark smoke runs" \
  ctest --test-dir build --output-on-failure --timeout 900 -j2
stage "sanitizer build" bash scripts/sanitizer_build.sh
# One entry per layer's binary (tests/CMakeLists.txt): the timed tests and the planner's layout
# searches are left to the Release stage above.
stage "unit tests under ASan + UBSan" \
  ctest --test-dir build-sanitize --output-on-failure --timeout 900 -j2
stage "fuzzing" bash scripts/fuzz.sh 8

bash tests/ci_budget.sh "$times"
