#!/usr/bin/env bash
# The default training run (configs/tiny.toml on the quick start's corpus) in f32 and in bf16,
# one after the other, and the held-out loss each ends with: bf16 must track f32 within 1%.
# About 6 minutes per run on 2 cores.
#   bench/precision_curve.sh [CORPUS]      (default: data/kjv.txt, which the quick start writes)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus="${1:-$root/data/kjv.txt}"
[[ -s "$corpus" ]] || { echo "no corpus at $corpus: run scripts/quickstart.sh or pass a text file" >&2; exit 2; }
[[ -x "$root/build/tessera" ]] || bash "$root/scripts/build.sh" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in f32 bf16; do
  "$root/build/tessera" train --data "$corpus" --out "$work/$p" --set train.precision=$p |
    sed -n 's/.*held-out loss [0-9.]* -> \([0-9.]*\) nats.*/\1/p' >"$work/$p.loss"
done
python3 - "$(cat "$work/f32.loss")" "$(cat "$work/bf16.loss")" <<'PY'
import sys
f32, bf16 = float(sys.argv[1]), float(sys.argv[2])
print(f"held-out loss after the default run: f32 {f32:.4f}, bf16 {bf16:.4f}, "
      f"difference {100 * (bf16 - f32) / f32:+.2f}%")
PY
