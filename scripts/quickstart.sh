#!/usr/bin/env bash
# The main job on built-in defaults: install what is missing, build, train the tiny byte-level
# GPT-2 on the King James Bible (from Debian's bible-kjv), then sample from it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh tessera_cli

corpus=data/kjv.txt
bash scripts/kjv_text.sh "$corpus"

run="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
build/tessera train --data "$corpus" --out "$run"
echo
echo "--- sample ---"
build/tessera generate --checkpoint "$run" --prompt "And God said" --max-tokens 400 --seed 1
