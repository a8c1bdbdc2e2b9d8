#!/usr/bin/env bash
# Configures and builds build-sanitize/: the unit tests and the fuzz targets under AddressSanitizer
# and UndefinedBehaviorSanitizer, compiled unoptimised by clang, with libFuzzer's coverage counters
# in the layers that read outside input (all but the kernels; CMakeLists.txt), so that the fuzz
# targets link the layers the tests ran. Every target, or the ones named. The end-to-end tests and
# the benchmarks run the Release build (scripts/build.sh) and are not built here; nor is the CUDA
# backend, whose nvcc objects take no sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-sanitize -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DTESSERA_SANITIZE=ON -DTESSERA_FUZZ=ON \
  -DTESSERA_E2E_TESTS=OFF -DTESSERA_BENCHMARKS=OFF -DTESSERA_CUDA=OFF >/dev/null
ninja --quiet -C build-sanitize "$@"
