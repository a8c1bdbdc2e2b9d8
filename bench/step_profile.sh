#!/usr/bin/env bash
# Where a training step's time goes: bench/train_step_bench --profile times every kernel call of
# the timed steps by class (kernels/op_profile.h: matmul, attention, norms/activations,
# conversions, loss, optimizer; "other" is the rest of the step: gradient clearing, copies,
# bookkeeping), in f32 and in bf16, and prints each class next to its roofline: its FLOPs over
# the same run's matmul rate in the step's precision (matmuls, attention), or the bytes it must
# move over the same run's copy bandwidth (the rest). Random tokens, no data files.
#   [THREADS=N] [BUILD=dir] bench/step_profile.sh [config ...]
# configs: toy (seconds: CI's check that the benchmark runs), tiny-50k, 124m, 124m-1k, llama-350m
# (default: 124m 124m-1k).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
[[ -x "$build/bench/train_step_bench" ]] || bash "$root/scripts/build.sh" train_step_bench >/dev/null

declare -A shape=(
  [toy]="--n-layer 2 --n-head 2 --d-model 64 --vocab 256 --batch 2 --seq 32 --warmup 1 --steps 2"
  [tiny-50k]="--n-layer 4 --n-head 4 --d-model 256 --vocab 50257 --batch 8 --seq 256 --warmup 2 --steps 5"
  [124m]="--n-layer 12 --n-head 12 --d-model 768 --vocab 50257 --batch 4 --seq 64 --warmup 2 --steps 5"
  [124m-1k]="--n-layer 12 --n-head 12 --d-model 768 --vocab 50257 --batch 4 --seq 1024 --warmup 1 --steps 2"
  [llama-350m]="--arch llama --n-layer 24 --n-head 16 --kv-heads 8 --d-model 1024 --vocab 32000 --batch 4 --seq 256 --warmup 1 --steps 2"
)
configs=("$@")
((${#configs[@]})) || configs=(124m 124m-1k)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_tile' /proc/cpuinfo |
    sort -u | tr '\n' ' ')"
for c in "${configs[@]}"; do
  [[ -n "${shape[$c]:-}" ]] || { echo "unknown config '$c' (${!shape[*]})" >&2; exit 2; }
  for precision in f32 bf16; do
    result="$("$build/bench/train_step_bench" ${shape[$c]} --precision "$precision" \
      --threads "${THREADS:-2}" --profile 1 --limits 1 | sed -n 's/^RESULT //p')"
    python3 - "$c" "$result" <<'PY'
import json, sys
name, r = sys.argv[1], json.loads(sys.argv[2])
lim, step = r["limits"], r["step_ms_mean"] / 1e3
rate = lim["f32_matmul_flops"] if r["precision"] == "f32" else lim["bf16_matmul_flops"]
path = "oneDNN sgemm" if r["precision"] == "f32" else lim["bf16_path"]
share = 100 * r["share_of_matmul_rate"]
print(f"\n{name} {r['precision']}: B{r['B']} T{r['T']}, step {1e3 * step:.0f} ms, "
      f"{r['tokens_per_s']:.0f} tok/s, model FLOPs/s {share:.0f}% of the {rate / 1e9:.0f} "
      f"GFLOP/s matmul rate ({path}); copy bandwidth {lim['copy_bandwidth'] / 1e9:.1f} GB/s")
print(f"  {'class':<18} {'ms/step':>8} {'share':>6} {'work':>13} {'roofline ms':>11} "
      f"{'of roofline':>11}")
counted = 0
for k, v in r["profile"].items():
    counted += v["seconds"]
    if v["flops"]:
        work, roof = f"{v['flops'] / 1e9:8.1f} GFLOP", v["flops"] / rate
    else:
        work, roof = f"{v['bytes'] / 1e9:8.2f} GB   ", v["bytes"] / lim["copy_bandwidth"]
    of_roof = 100 * roof / v["seconds"] if v["seconds"] > 0 else 0
    print(f"  {k:<18} {1e3 * v['seconds']:8.1f} {100 * v['seconds'] / step:5.1f}% {work:>13} "
          f"{1e3 * roof:11.1f} {of_roof:10.0f}%")
print(f"  {'other':<18} {1e3 * (step - counted):8.1f} {100 * (step - counted) / step:5.1f}%")
PY
  done
done
