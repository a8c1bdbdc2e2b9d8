#!/usr/bin/env bash
# The default training run (configs/tiny.toml on the quick start's corpus) in f32 and in bf16,
# one after the other, and the held-out loss each ends with: bf16 must track f32 within 1%.
# About 6 minutes per run on 2 cores; STEPS, BATCH and SEQ shrink the runs (the default run's
# 600 steps of 16 x 256 tokens).
#   [STEPS=N] [BATCH=N] [SEQ=N] [BUILD=dir] bench/precision_curve.sh [CORPUS]
# CORPUS defaults to data/kjv.txt, which the quick start writes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tessera="${BUILD:-$root/build}/tessera"
corpus="${1:-$root/data/kjv.txt}"
[[ -s "$corpus" ]] || { echo "no corpus at $corpus: run scripts/quickstart.sh or pass a text file" >&2; exit 2; }
[[ -x "$tessera" ]] || bash "$root/scripts/build.sh" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
overrides=()
[[ -n "${STEPS:-}" ]] && overrides+=(--set train.steps="$STEPS")
[[ -n "${BATCH:-}" ]] && overrides+=(--set train.batch_size="$BATCH")
[[ -n "${SEQ:-}" ]] && overrides+=(--set train.seq_len="$SEQ")
for p in f32 bf16; do
  "$tessera" train --data "$corpus" --out "$work/$p" --set train.precision=$p "${overrides[@]}" |
    sed -n 's/.*held-out loss [0-9.]* -> \([0-9.]*\) nats.*/\1/p' >"$work/$p.loss"
done
python3 - "$(cat "$work/f32.loss")" "$(cat "$work/bf16.loss")" <<'PY'
import sys
f32, bf16 = float(sys.argv[1]), float(sys.argv[2])
print(f"held-out loss after the default run: f32 {f32:.4f}, bf16 {bf16:.4f}, "
      f"difference {100 * (bf16 - f32) / f32:+.2f}%")
PY
