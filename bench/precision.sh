#!/usr/bin/env bash
# bf16 against f32 training steps on the same model, side by side: full forward + backward +
# AdamW on random tokens through bench/train_step_bench, each precision REPEATS times (default
# 2), alternating, best kept. Prints tokens/s of both and the ratio bf16 / f32.
#   [REPEATS=N] bench/precision.sh [tiny|tiny-50k|llama-tiny ...]      (default: all)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ours="$root/build/bench/train_step_bench"
[[ -x "$ours" ]] || bash "$root/scripts/build.sh" >/dev/null

declare -A shape=(
  [tiny]="--vocab 256 --n-layer 4 --n-head 4 --d-model 256 --batch 16 --seq 256"
  [tiny-50k]="--vocab 50257 --n-layer 4 --n-head 4 --d-model 256 --batch 8 --seq 256"
  [llama-tiny]="--arch llama --vocab 256 --n-layer 4 --n-head 4 --d-model 256 --batch 16 --seq 256"
)
tokens_per_s() { sed -n 's/^RESULT //p' | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])'; }
best() { python3 -c 'import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))' "$1" "$2"; }

configs=("$@")
((${#configs[@]})) || configs=(tiny tiny-50k llama-tiny)
printf '%-11s %12s %12s %12s\n' config "f32 tok/s" "bf16 tok/s" "bf16/f32"
for c in "${configs[@]}"; do
  [[ -n "${shape[$c]:-}" ]] || { echo "unknown config '$c' (tiny, tiny-50k, llama-tiny)" >&2; exit 2; }
  f32=0 bf16=0
  for ((i = 0; i < ${REPEATS:-2}; i++)); do
    f32=$(best "$f32" "$("$ours" ${shape[$c]} --precision f32 --warmup 3 --steps 10 | tokens_per_s)")
    bf16=$(best "$bf16" "$("$ours" ${shape[$c]} --precision bf16 --warmup 3 --steps 10 | tokens_per_s)")
  done
  python3 -c "import sys; a,b=float(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]:<11} {a:12.1f} {b:12.1f} {b/a:12.2f}')" "$c" "$f32" "$bf16"
done
