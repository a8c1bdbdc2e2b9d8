#!/usr/bin/env bash
# Compiles one of llama.cpp's own command-line tools (llama-bench, llama-quantize) with one g++
# line from the llama.cpp source that the npm package node-llama-cpp (pinned here) bundles,
# against the CPU libraries it ships, into OUT_DIR (kept there: a later call reuses it), and
# prints its path. The CPU backends are loaded from the executable's folder, so the shipped ones
# are linked in beside it. Fails, saying so, when node-llama-cpp is not installed
# (scripts/setup.sh --test or --bench installs it).
#   tests/llama_cpp/build_tool.sh llama-bench|llama-quantize OUT_DIR
set -euo pipefail
tool="${1:?usage: build_tool.sh llama-bench|llama-quantize OUT_DIR}"
out="${2:?usage: build_tool.sh llama-bench|llama-quantize OUT_DIR}"
here="$(cd "$(dirname "$0")" && pwd)"
modules="$here/node_modules"
libs="$modules/@node-llama-cpp/linux-x64/bins/linux-x64"
case "$tool" in
  llama-bench) sources=(tools/llama-bench/llama-bench.cpp tools/llama-bench/main.cpp) ;;
  llama-quantize) sources=(tools/quantize/quantize.cpp tools/quantize/main.cpp) ;;
  *) echo "build_tool.sh: unknown tool $tool (llama-bench or llama-quantize)" >&2; exit 2 ;;
esac
if [[ ! -d "$libs" ]]; then
  echo "build_tool.sh: $modules has no node-llama-cpp (scripts/setup.sh --test installs it)" >&2
  exit 1
fi
mkdir -p "$out"
# Tests that need the same tool build it at once; the first to take the lock builds, the rest
# wait for it and reuse its result.
exec {lock}>"$out/.build.lock"
flock "$lock"
if [[ ! -x "$out/$tool" ]]; then
  src="$out/src"
  [[ -d "$src" ]] || git clone -q "$modules/node-llama-cpp/llama/gitRelease.bundle" "$src" 2>/dev/null
  g++ -std=c++17 -O2 -DNDEBUG -I"$src/include" -I"$src/ggml/include" -I"$src/common" \
    -I"$src/vendor" "${sources[@]/#/$src/}" \
    -L"$libs" -l:libllama-common.so -l:"$(basename "$libs"/libllama.v*.so)" \
    -l:"$(basename "$libs"/libggml.v*.so)" -l:libggml-base.so -Wl,-rpath,"$libs" -o "$out/$tool"
  for backend in "$libs"/libggml-cpu-*.so; do
    [[ -e "$out/$(basename "$backend")" ]] || ln -s "$backend" "$out/"
  done
fi
flock -u "$lock"
echo "$out/$tool"
