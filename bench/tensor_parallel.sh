#!/usr/bin/env bash
# GPT-2 124M (CONFIG picks another GPT-2) training steps on 2 ranks (one thread each) at tp = 1
# (dp = 2) and tp = 2 for the same global batch, with the time the model's tensor-parallel
# collectives took per step next to what `tessera plan` predicts for the same layout on this
# machine. The planner is given this machine's own all-reduce latency and rate, measured by the
# same MPI with 4 bytes and at the size of one tensor-parallel all-reduce, as a catalog entry, so
# the comparison tests the planner's model of the step's communication rather than a catalog's
# figures. The peer is the layout itself: tp = 2 against tp = 1 on the same ranks.
#   [BATCH=4] [SEQ=64] [STEPS=4] [CONFIG=configs/gpt2-124m.toml] [BUILD=dir]
#   bench/tensor_parallel.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
bench="$build/bench/train_step_bench"
tessera="$build/tessera"
[[ -x "$bench" && -x "$tessera" ]] || bash "$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
batch=${BATCH:-4}
seq=${SEQ:-64}
config="${CONFIG:-$root/configs/gpt2-124m.toml}"
read -r vocab n_layer n_head d_model < <(python3 "$root/bench/config_values.py" "$config" \
  model.vocab_size model.n_layer model.n_head model.d_model)
shape=(--vocab "$vocab" --n-layer "$n_layer" --n-head "$n_head" --d-model "$d_model" --seq "$seq"
       --threads 1 --warmup 2 --steps "${STEPS:-4}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

result() { sed -n 's/^RESULT //p'; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"

# One tensor-parallel all-reduce moves a micro-batch's activations: batch x seq x d_model f32.
bytes=$((batch * seq * d_model * 4))
mean_allreduce_s() {  # bytes -> mean seconds of an all-reduce over 2 ranks
  mpirun --oversubscribe -np 2 "$bench" --probe-allreduce "$1" | result |
    field '["allreduce_s_mean"]'
}
allreduce_s=$(mean_allreduce_s "$bytes")
latency_s=$(mean_allreduce_s 4)
printf 'all-reduce of %d bytes over 2 ranks: %.3f ms (%.2f GB/s)\n' "$bytes" \
  "$(python3 -c "print(1e3 * $allreduce_s)")" "$(python3 -c "print($bytes / $allreduce_s / 1e9)")"
printf 'all-reduce of 4 bytes over 2 ranks: %.3f ms\n\n' "$(python3 -c "print(1e3 * $latency_s)")"
# The planner prices a 2-rank all-reduce as NCCL's ring: a start, two steps and the whole buffer
# at the scale-up bandwidth (a ring over n ranks moves 2 (n - 1) / n of it per rank). The 4-byte
# all-reduce is the start and the two steps, split evenly; the bandwidth is what the larger one
# took beyond it.
read -r start_us step_us bandwidth_gbps < <(python3 -c "
import sys
latency, whole, size = $latency_s, $allreduce_s, $bytes
if whole <= latency:
    sys.exit(f'an all-reduce of {size} bytes took no longer than one of 4 bytes: too few bytes '
             'to measure a bandwidth; raise BATCH or SEQ')
print(1e6 * latency / 3, 1e6 * latency / 3, size / (whole - latency) / 1e9)")

# One scale-up domain of 2 chips: the scale-out figures are never used, nor the matmul ones, as
# only the tensor-parallel time is read.
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
collective_start_us = $start_us
scaleup_step_latency_us = $step_us
scaleout_step_latency_us = $step_us
scaleup_torus_dims = 1
matmul_peak_fraction = 1
matmul_half_width = 1
matmul_source = "not measured: bench/tensor_parallel.sh reads only the tensor-parallel time"
source = "measured by bench/tensor_parallel.sh"
date = "$(date +%Y-%m)"
EOF

planned_tp_ms() {  # layout -> the planner's tensor-parallel seconds per step, in ms
  "$tessera" plan --model "$config" --catalog "$work/this-machine.toml" \
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
