#!/usr/bin/env bash
# GPT-2 124M training steps on 2 ranks (one thread each) at tp = 1 (dp = 2) and tp = 2 for the
# same global batch, with the time the model's tensor-parallel collectives took per step next to
# what `tessera plan` predicts for the same layout on this machine. The planner is given this
# machine's own all-reduce rate, measured by the same MPI at the size of one tensor-parallel
# all-reduce, as a catalog entry, so the comparison tests the planner's model of the step's
# communication rather than a catalog's figures. The peer is the layout itself: tp = 2 against
# tp = 1 on the same ranks.
#   [BATCH=4] [SEQ=64] [STEPS=4] bench/tensor_parallel.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bench="$root/build/bench/train_step_bench"
tessera="$root/build/tessera"
[[ -x "$bench" && -x "$tessera" ]] || bash "$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
batch=${BATCH:-4}
seq=${SEQ:-64}
shape=(--vocab 50257 --n-layer 12 --n-head 12 --d-model 768 --seq "$seq" --threads 1 --warmup 2
       --steps "${STEPS:-4}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

result() { sed -n 's/^RESULT //p'; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"

# One tensor-parallel all-reduce moves a micro-batch's activations: batch x seq x d_model f32.
bytes=$((batch * seq * 768 * 4))
allreduce_s=$(mpirun --oversubscribe -np 2 "$bench" --probe-allreduce "$bytes" | result |
              field '["allreduce_s_mean"]')
# A ring all-reduce over n ranks moves 2 (n - 1) / n of the buffer per rank: over 2 ranks, all
# of it. That is the rate the planner's scale-up bandwidth stands for.
bandwidth_gbps=$(python3 -c "print($bytes / $allreduce_s / 1e9)")
printf 'all-reduce of %d bytes over 2 ranks: %.3f ms (%.2f GB/s)\n\n' "$bytes" \
  "$(python3 -c "print(1e3 * $allreduce_s)")" "$bandwidth_gbps"

cat >"$work/this-machine.toml" <<EOF
[this-machine]
description = "this machine's 2 MPI ranks, as measured by bench/tensor_parallel.sh"
kind = "gpu"
peak_bf16_tflops = 1
hbm_gib = 64
hbm_bandwidth_gbps = 20
scaleup_domain = 2
scaleup_bandwidth_gbps = $bandwidth_gbps
scaleout_bandwidth_gbps = $bandwidth_gbps
source = "measured by bench/tensor_parallel.sh"
date = "$(date +%Y-%m)"
EOF

planned_tp_ms() {  # layout -> the planner's tensor-parallel seconds per step, in ms
  "$tessera" plan --model "$root/configs/gpt2-124m.toml" --catalog "$work/this-machine.toml" \
    --hardware this-machine --chips 2 --global-batch "$batch" --seq-len "$seq" --precision f32 \
    --layout "$1" --json | field '["step_seconds"]["tensor_parallel"] * 1e3'
}

printf '%-22s %10s %9s %16s %16s %9s\n' layout step_ms tok/s tp_comm_ms planned_tp_ms measured/plan
for tp in 1 2; do
  dp=$((2 / tp))
  run=$(mpirun --oversubscribe -np 2 "$bench" "${shape[@]}" --batch $((batch / dp)) --tp "$tp" |
        result)
  step=$(echo "$run" | field '["step_ms_mean"]')
  comm=$(echo "$run" | field '["model_comm_ms_mean"]')
  layout="dp=$dp,tp=$tp,zero=0,mb=$((batch / dp)),recompute=none,sp=0"
  planned=$(planned_tp_ms "$layout")
  python3 -c "
import sys
step, comm, planned = map(float, sys.argv[2:5])
tokens = $batch * $seq / (step / 1e3)
ratio = f'{comm / planned:9.2f}' if planned > 0 else '        -'
print(f'{sys.argv[1]:<22} {step:10.1f} {tokens:9.1f} {comm:16.1f} {planned:16.1f} {ratio}')
" "dp=$dp tp=$tp" "$step" "$comm" "$planned"
done
echo
echo "tp_comm_ms: wall time inside the model's blocking tensor-parallel collectives per step,"
echo "which includes waiting for the other rank; planned_tp_ms: the planner's tensor-parallel"
echo "time for the same layout with this machine's all-reduce rate."
