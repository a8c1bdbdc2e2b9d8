#!/usr/bin/env bash
# How much of data parallelism's gradient all-reduce backward hides, measured under mpirun with
# 2 ranks on this machine: the same training step with no communication, with bucketed
# all-reduces overlapping backward (what the trainer does), and with all communication after
# backward. hidden = 1 - (overlap - none) / (after - none); slowdown = overlap / none, the cost
# of a step with communication against one without. Each bucket size is tried; the best-hiding
# one is the default of dist.bucket_mb. Then each ZeRO stage's step (overlapped, 4 MiB buckets)
# against the step without communication.
#   [RANKS=2] [REPEATS=2] [BUILD=dir] bench/dp_overlap.sh [model flags for train_step_bench]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ours="${BUILD:-$root/build}/bench/train_step_bench"
[[ -x "$ours" ]] || bash "$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ranks=${RANKS:-2}
shape=("$@")
((${#shape[@]})) || shape=(--vocab 50257 --n-layer 12 --n-head 12 --d-model 768 --batch 2 --seq 64)

step_ms() {  # comm bucket_mb [zero] -> best mean step time (ms) over REPEATS runs
  local best=""
  for ((i = 0; i < ${REPEATS:-2}; i++)); do
    local ms
    ms=$(mpirun --oversubscribe -np "$ranks" "$ours" "${shape[@]}" --threads 1 --comm "$1" \
           --bucket-mb "$2" --zero "${3:-0}" --warmup 2 --steps 6 |
         sed -n 's/^RESULT //p' | python3 -c 'import json,sys; print(json.load(sys.stdin)["step_ms_mean"])')
    best=$(python3 -c 'import sys; v=[float(x) for x in sys.argv[1:] if x]; print(min(v))' "$ms" "$best")
  done
  echo "$best"
}

none=$(step_ms none 4)
printf 'ranks %s, model: %s\nno communication: %.1f ms per step\n\n' "$ranks" "${shape[*]}" "$none"
printf '%10s %12s %12s %8s %9s\n' bucket_MiB overlap_ms after_ms hidden slowdown
for mb in 1 4 16 64; do
  overlap=$(step_ms overlap "$mb")
  after=$(step_ms after "$mb")
  python3 -c "import sys; n,o,a=map(float,sys.argv[2:5]); h=1-(o-n)/(a-n) if a>n else float('nan'); print(f'{sys.argv[1]:>10} {o:12.1f} {a:12.1f} {h:8.2f} {o/n:9.2f}')" "$mb" "$none" "$overlap" "$after"
done

printf '\n%10s %12s %9s\n' zero_stage step_ms slowdown
for zero in 0 1 2 3; do
  ms=$(step_ms overlap 4 "$zero")
  python3 -c "import sys; n,m=map(float,sys.argv[2:4]); print(f'{sys.argv[1]:>10} {m:12.1f} {m/n:9.2f}')" "$zero" "$none" "$ms"
done
