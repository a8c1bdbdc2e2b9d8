#!/usr/bin/env bash
# The main job on built-in defaults: install what is missing, build, train the tiny byte-level
# GPT-2 on the King James Bible (from Debian's bible-kjv), then sample from it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh tessera_cli

corpus=data/kjv.txt
if [[ ! -s "$corpus" ]]; then
  mkdir -p data
  # One verse per line; the verse reference ("Ge1:1") is stripped.
  bible -f "Gen1:1-Rev22:21" | sed 's/^[^ ]* //' >"$corpus.tmp"
  mv "$corpus.tmp" "$corpus"
fi

run="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
build/tessera train --data "$corpus" --out "$run"
echo
echo "--- sample ---"
build/tessera generate --checkpoint "$run" --prompt "And God said" --max-tokens 400 --seed 1
