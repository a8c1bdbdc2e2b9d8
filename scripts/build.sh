#!/usr/bin/env bash
# Configures and builds Tessera (Release, Ninja) into build/: every target, or the ones named
# (e.g. tessera_cli, the binary alone).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build "$@"
