#!/usr/bin/env bash
# Training steps of a Llama (grouped-query attention) on long sequences, one sequence a step, on
# this machine's cores two ways: one rank with 2 threads, and cp = 2 (each of 2 ranks, one thread
# each, holding an early and a late chunk of every sequence). The peer is the same step on one
# rank. For each sequence length it prints both step times and their ratio, the time the cp ranks
# spent in their key/value exchange (all-gathers forward and backward, the reduce-scatter of
# their gradients; blocking, so none of it is hidden behind compute) with its share of the step
# and its rate, and the one-rank step's model FLOPs/s as a share of this machine's matmul rate.
#   [SEQS="8192 16384"] [LAYERS=4] [D_MODEL=256] [HEADS=8] [KV_HEADS=2] [STEPS=2] [BUILD=dir]
#   bench/context_parallel.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
bench="$build/bench/train_step_bench"
[[ -x "$bench" ]] || bash "$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
layers=${LAYERS:-4} d_model=${D_MODEL:-256} heads=${HEADS:-8} kv_heads=${KV_HEADS:-2}
shape=(--arch llama --vocab 256 --n-layer "$layers" --n-head "$heads" --kv-heads "$kv_heads"
       --d-model "$d_model" --batch 1 --warmup 1 --steps "${STEPS:-2}" --precision f32)

result() { sed -n 's/^RESULT //p'; }

lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
amx=$(grep -q -w amx_tile /proc/cpuinfo && echo "AMX" || echo "no AMX")
echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u |
  tr '\n' ' ')($amx)"
echo "Llama $layers layers, d_model $d_model, $heads heads over $kv_heads key/value heads, f32;" \
  "kernel path: AVX-512 attention (query blocks of 128 against the keys the causal mask keeps)"
printf '%-7s %12s %12s %9s %14s %10s %8s %10s %14s\n' tokens one_rank_ms cp2_ms one/cp2 \
  kv_exchange_ms of_step hidden kv_GB/s one_of_matmul
for seq in ${SEQS:-8192 16384}; do
  one=$("$bench" "${shape[@]}" --seq "$seq" --threads 2 --comm none --limits 1 | result)
  cp=$(mpirun --oversubscribe -np 2 "$bench" "${shape[@]}" --seq "$seq" --threads 1 --cp 2 |
       result)
  python3 - "$seq" "$one" "$cp" "$d_model" "$heads" "$kv_heads" "$layers" <<'EOF'
import json, sys
seq, one, cp = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
d_model, heads, kv_heads, layers = map(int, sys.argv[4:8])
one_ms, cp_ms, comm_ms = one["step_ms_mean"], cp["step_ms_mean"], cp["model_comm_ms_mean"]
# Bytes each rank receives per step: per layer, the other rank's keys and values twice (the
# forward's gather and the backward's) and their gradients once (the reduce-scatter).
kv_bytes = seq / 2 * 2 * kv_heads * (d_model // heads) * 4
received = 3 * layers * kv_bytes
print(f"{seq:<7} {one_ms:12.1f} {cp_ms:12.1f} {one_ms / cp_ms:9.2f} {comm_ms:14.1f} "
      f"{comm_ms / cp_ms:9.1%} {0:7.0%} {received / (comm_ms / 1e3) / 1e9:10.2f} "
      f"{one['share_of_matmul_rate']:14.1%}")
EOF
done
echo
echo "one/cp2: the one-rank step time over cp = 2's on the same two cores (above 1: cp is"
echo "faster). kv_exchange_ms: wall time inside the cp ranks' blocking collectives per step,"
echo "waiting for the other rank included; hidden: the share of it overlapped with compute."
