#!/usr/bin/env bash
# Training steps side by side with PyTorch, from a clone: the same models, shapes and random
# token ids (generated, no data files) trained through bench/train_step_bench and through
# bench/torch_train_peer.py (Debian's python3-torch, checked and run at its best by
# bench/torch_env.sh), a full step each (forward, backward, AdamW), in f32 and in bf16 (ours:
# bf16 matmul operands with f32 master weights; the peer: torch.autocast to bfloat16).
# Each side runs REPEATS rounds (default 3), alternating, and keeps its best tokens/s. Prints
# the CPU, the kernel paths, the machine's matmul rates measured in the same run, and per
# config: tokens/s of both, our model FLOPs/s as a share of the matmul rate in our precision,
# and the ratios. Installs what is missing first (scripts/setup.sh --bench), unless INSTALL=0.
#   [REPEATS=N] [THREADS=N] [BUILD=dir] [INSTALL=0] bench/train_step.sh [config ...]
# configs: toy and toy-docs (seconds: CI's check that the benchmark runs), tiny, tiny-50k, 124m,
# 124m-1k, tiny-1k and tiny-1k-docs (the same 1K-token rows packed with documents of 128 tokens
# that do not attend to each other: ours train.document_mask, the peer a block-diagonal causal
# mask), llama-350m (default: tiny-50k 124m 124m-1k).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
threads="${THREADS:-2}"
[[ "${INSTALL:-1}" == 0 ]] || bash "$root/scripts/setup.sh" --bench
[[ -x "$build/bench/train_step_bench" ]] || bash "$root/scripts/build.sh" train_step_bench >/dev/null

# name|model|batch and sequence|warm-up and timed steps (the peer's are far slower at 1K tokens)
configs=(
  "toy|--n-layer 2 --n-head 2 --d-model 64 --vocab 256|--batch 2 --seq 32|--warmup 1 --steps 2"
  "toy-docs|--n-layer 2 --n-head 2 --d-model 64 --vocab 256|--batch 2 --seq 32 --documents 8|--warmup 1 --steps 2"
  "tiny|--n-layer 4 --n-head 4 --d-model 256 --vocab 256|--batch 16 --seq 256|--warmup 2 --steps 5"
  "tiny-50k|--n-layer 4 --n-head 4 --d-model 256 --vocab 50257|--batch 8 --seq 256|--warmup 2 --steps 5"
  "124m|--n-layer 12 --n-head 12 --d-model 768 --vocab 50257|--batch 4 --seq 64|--warmup 2 --steps 5"
  "124m-1k|--n-layer 12 --n-head 12 --d-model 768 --vocab 50257|--batch 4 --seq 1024|--warmup 1 --steps 2"
  "tiny-1k|--n-layer 4 --n-head 4 --d-model 256 --vocab 50257|--batch 4 --seq 1024|--warmup 1 --steps 3"
  "tiny-1k-docs|--n-layer 4 --n-head 4 --d-model 256 --vocab 50257|--batch 4 --seq 1024 --documents 128|--warmup 1 --steps 3"
  "llama-350m|--arch llama --n-layer 24 --n-head 16 --kv-heads 8 --d-model 1024 --vocab 32000|--batch 4 --seq 256|--warmup 1 --steps 2"
)
wanted=("$@")
((${#wanted[@]})) || wanted=(tiny-50k 124m 124m-1k)

# shellcheck source=bench/torch_peer.bash
source "$root/bench/torch_peer.bash"
check_cpu_and_peer "$threads"

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
for name in "${wanted[@]}"; do
  row="$(config_row "$name")"
  IFS='|' read -r _ model shape steps <<<"$row"
  for ((round = 0; round < ${REPEATS:-3}; round++)); do
    for precision in f32 bf16; do
      limits=0
      ((round == 0)) && [[ "$precision" == f32 ]] && limits=1
      "$build/bench/train_step_bench" $model $shape $steps --precision "$precision" \
        --threads "$threads" --limits "$limits" | sed -n "s/^RESULT /$name ours $precision /p" >>"$results"
      if ((peer_ok)); then
        bash "$root/bench/torch_env.sh" "$root/bench/torch_train_peer.py" $model $shape $steps \
          --precision "$precision" --threads "$threads" |
          sed -n "s/^RESULT /$name peer $precision /p" >>"$results"
      fi
    done
  done
done

python3 - "$results" "${wanted[@]}" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    name, side, precision, payload = line.split(" ", 3)
    r = json.loads(payload)
    best = rows.setdefault(name, {}).setdefault((side, precision), r)
    if r["tokens_per_s"] > best["tokens_per_s"]:
        rows[name][(side, precision)] = r
    if "limits" in r:
        rows[name]["limits"] = r["limits"]
first = next(iter(rows.values()))
limits = first["limits"]
print(f"ours: f32 matmul oneDNN sgemm {limits['f32_matmul_flops'] / 1e9:.0f} GFLOP/s, bf16 "
      f"{limits['bf16_path']} {limits['bf16_matmul_flops'] / 1e9:.0f} GFLOP/s "
      "(4096x768x3072, measured in this run)")
print(f"{'config':<13} {'prec':<5} {'ours tok/s':>10} {'of matmul':>9} {'torch f32':>10} "
      f"{'torch bf16':>10} {'ours/torch':>10} {'ours/torch f32':>14}")
for name in sys.argv[2:]:
    r = rows[name]
    lim = r["limits"]
    for precision in ("f32", "bf16"):
        ours = r[("ours", precision)]
        rate = lim["f32_matmul_flops"] if precision == "f32" else lim["bf16_matmul_flops"]
        share = ours["model_flops_per_s"] / rate
        peer = {p: r.get(("peer", p), {}).get("tokens_per_s") for p in ("f32", "bf16")}
        same = peer[precision]
        cell = lambda v: f"{v:10.1f}" if v else f"{'-':>10}"
        ratio = f"{ours['tokens_per_s'] / same:10.2f}" if same else f"{'-':>10}"
        vs_f32 = (f"{ours['tokens_per_s'] / peer['f32']:14.2f}"
                  if precision == "bf16" and peer["f32"] else f"{'':>14}")
        print(f"{name:<13} {precision:<5} {ours['tokens_per_s']:10.1f} {100 * share:8.0f}% "
              f"{cell(peer['f32'])} {cell(peer['bf16'])} {ratio} {vs_f32}")
print("(of matmul: our model FLOPs/s, 6 x weights + 12 x layers x seq x width per token, over the "
      "matmul rate in our precision, attention counted causal over the whole row even where "
      "packed documents skip most of it; tokens/s best of each side's rounds)")
PY
