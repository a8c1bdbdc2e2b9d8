#!/usr/bin/env bash
# Installs the Debian packages Tessera needs, only those missing. `--test` adds what the test
# suite needs on top of the build (PyTorch for the reference check, node and the npm reference
# tokenisers with their GPT-2 vocabulary files for the tokenizer tests, the official OpenAI
# client for the server's client test, Chromium with playwright-core for the live page's test,
# and the peers of bench/ for the benchmarks' smoke runs). `--bench` adds the peers of bench/:
# PyTorch with OpenBLAS behind libblas.so.3 (without it PyTorch's f32 matmuls fall to the
# reference BLAS), and llama.cpp from node-llama-cpp.
set -euo pipefail

# oneDNN's CMake package looks for OpenCL headers (a recommendation of libdnnl-dev).
packages=(cmake ninja-build g++ pkg-config libdnnl-dev ocl-icd-opencl-dev libspdlog-dev libfmt-dev
          nlohmann-json3-dev libtomlplusplus-dev zlib1g-dev libisal-dev libboost1.81-dev
          libcpp-httplib-dev libyaml-cpp-dev libgtest-dev libcli11-dev openmpi-bin libopenmpi-dev bible-kjv bible-kjv-text)
mode="${1:-}"
[[ -z "$mode" || "$mode" == --test || "$mode" == --bench ]] ||
  { echo "setup.sh: unknown option '$mode' (--test, --bench)" >&2; exit 2; }
if [[ "$mode" == --bench ]]; then
  packages+=(python3 python3-torch libopenblas0-openmp nodejs)
  command -v npm >/dev/null || packages+=(npm)
fi
if [[ "$mode" == --test ]]; then
  packages+=(python3 python3-torch libopenblas0-openmp nodejs chromium)
  packages+=(clang libclang-rt-14-dev libomp-dev)  # libFuzzer, ASan, UBSan, OpenMP: scripts/fuzz.sh
  # Debian ships npm as its own package; NodeSource's nodejs bundles it and conflicts with it.
  command -v npm >/dev/null || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
npm_dirs=()
[[ "$mode" == --test ]] && npm_dirs=("$root/tests/tokenizer" "$root/tests/serve/openai_client"
  "$root/tests/e2e/page" "$root/tests/serve/chat_templates" "$root/tests/llama_cpp")
[[ "$mode" == --bench ]] && npm_dirs=("$root/tests/llama_cpp")
if ((${#npm_dirs[@]})); then
  # tests/llama_cpp's .npmrc leaves out node-llama-cpp's optional GPU builds (83 MB, not 732).
  for npm_dir in "${npm_dirs[@]}"; do
    # Again when package.json changed since the last install.
    if [[ ! "$npm_dir/node_modules/.package-lock.json" -nt "$npm_dir/package.json" ]]; then
      echo "installing npm packages into $npm_dir/node_modules"
      npm install --silent --no-audit --no-fund --prefix "$npm_dir" >/dev/null
    fi
  done
fi
