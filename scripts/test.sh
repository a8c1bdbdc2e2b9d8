#!/usr/bin/env bash
# Installs what is missing, builds, runs the whole test suite through CTest, runs the unit tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer, then runs every fuzz target for its
# time budget.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
bash scripts/build.sh
ctest --test-dir build --output-on-failure --timeout 900

echo "--- unit tests under ASan + UBSan"
# The end-to-end tests and the benchmarks run the Release build above; this stage builds neither.
# The CUDA backend is built and linked by the Release stage; nvcc's objects do not take the
# sanitizers, so this stage checks the CPU backend alone.
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_SANITIZE=ON \
  -DTESSERA_E2E_TESTS=OFF -DTESSERA_BENCHMARKS=OFF -DTESSERA_CUDA=OFF >/dev/null
ninja -C build-sanitize >/dev/null
# The planner's layout search is arithmetic over thousands of layouts: the Release stage above
# runs it, and under the Debug sanitizer build it alone would take most of the time budget.
# Two at a time: the planner's and the kernels' timing tests run alone (RUN_SERIAL).
ctest --test-dir build-sanitize --output-on-failure --timeout 900 -j2 \
  --exclude-regex '^PlannerValidation\.SearchRanks'

bash scripts/fuzz.sh
