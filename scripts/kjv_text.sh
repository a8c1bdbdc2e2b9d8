#!/usr/bin/env bash
# Writes the King James Bible from Debian's bible-kjv (installed by scripts/setup.sh) to FILE, one
# verse per line with its reference ("Ge1:1") stripped, unless FILE already holds it: the text the
# quick start trains on and the benchmarks read.
#   scripts/kjv_text.sh FILE
set -euo pipefail
out="$1"
[[ -s "$out" ]] && exit 0
mkdir -p "$(dirname "$out")"
bible -f "Gen1:1-Rev22:21" | sed 's/^[^ ]* //' >"$out.tmp"
mv "$out.tmp" "$out"
