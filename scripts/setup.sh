#!/usr/bin/env bash
# Installs the Debian packages Tessera needs, only those missing. `--test` adds what the test
# suite needs on top of the build (PyTorch for the reference check).
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config libdnnl-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
          libtomlplusplus-dev zlib1g-dev libgtest-dev bible-kjv bible-kjv-text)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(python3 python3-torch)
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
