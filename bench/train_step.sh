#!/usr/bin/env bash
# Side-by-side training-step benchmark: the same GPT-2 shapes (vocab 50257, random tokens, fp32,
# full forward + backward + AdamW) through Tessera and through the PyTorch peer, in one run.
# Each side runs REPEATS times (default 2), alternating, and keeps its best: the peer is compared
# at its best, and so are we. Prints tokens/s for both and the ratio ours / peer.
#   [REPEATS=N] bench/train_step.sh [tiny|124m ...]      (default: both)
# The peer is ../shared/bench/torch_peer.sh beside the repository (override with TORCH_PEER).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
peer="${TORCH_PEER:-$root/../shared/bench/torch_peer.sh}"
ours="$root/build/bench/train_step_bench"
if [[ ! -x "$peer" ]]; then
  echo "SKIPPED: the PyTorch peer $peer is absent; nothing to compare against"
  exit 0
fi
[[ -x "$ours" ]] || bash "$root/scripts/build.sh" >/dev/null

declare -A shape=(
  [tiny]="--n-layer 4 --n-head 4 --d-model 256 --batch 8 --seq 256"
  [124m]="--n-layer 12 --n-head 12 --d-model 768 --batch 4 --seq 64"
)
tokens_per_s() { sed -n 's/^RESULT //p' | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])'; }

best() { python3 -c 'import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))' "$1" "$2"; }

configs=("$@")
((${#configs[@]})) || configs=(tiny 124m)
printf '%-6s %14s %14s %8s\n' config "tessera tok/s" "torch tok/s" ratio
for c in "${configs[@]}"; do
  [[ -n "${shape[$c]:-}" ]] || { echo "unknown config '$c' (tiny, 124m)" >&2; exit 2; }
  ours_tps=0 peer_tps=0
  for ((i = 0; i < ${REPEATS:-2}; i++)); do
    ours_tps=$(best "$ours_tps" "$("$ours" ${shape[$c]} --vocab 50257 --warmup 3 --steps 10 | tokens_per_s)")
    peer_tps=$(best "$peer_tps" "$("$peer" --config "$c" --mode train --warmup 3 --steps 10 | tokens_per_s)")
  done
  python3 -c "import sys; o,p=float(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]:<6} {o:14.1f} {p:14.1f} {o/p:8.2f}')" "$c" "$ours_tps" "$peer_tps"
done
