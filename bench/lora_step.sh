#!/usr/bin/env bash
# LoRA fine-tuning steps against full fine-tuning of the same model, side by side with PyTorch:
# bench/train_step_bench and bench/torch_train_peer.py (Debian's python3-torch at its best, through
# bench/torch_env.sh) train the same shapes on the same random token ids, a full step each
# (forward, backward, AdamW), in f32, once training every weight and once training adapters of
# rank RANK (default 16, alpha 2 RANK) on the attention and MLP linears of the frozen model (the
# peer as PEFT does it: frozen parameters, one A and B per Hugging Face module). Each side runs
# REPEATS rounds (default 3), alternating, and keeps its best tokens/s. Prints the CPU and, per
# config and mode: the parameters trained, the model state held (parameters, gradients, AdamW
# moments), tokens/s of both sides and their ratio, and LoRA's speed-up over full training.
# DROPOUT=P (default 0) trains the adapters with dropout P on their inputs, on both sides.
# QUANTIZE=q8_0 holds the frozen model's block matrices in q8_0 on both sides (default none).
# Installs what is missing first (scripts/setup.sh --bench), unless INSTALL=0.
#   [REPEATS=N] [THREADS=N] [RANK=R] [DROPOUT=P] [QUANTIZE=q8_0] [BUILD=dir] [INSTALL=0] bench/lora_step.sh [config ...]
# configs: toy (seconds: CI's check that the benchmark runs), 124m, llama-350m (default: 124m).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
threads="${THREADS:-2}"
rank="${RANK:-16}"
dropout="${DROPOUT:-0}"
quantize="${QUANTIZE:-none}"
[[ "${INSTALL:-1}" == 0 ]] || bash "$root/scripts/setup.sh" --bench
[[ -x "$build/bench/train_step_bench" ]] || bash "$root/scripts/build.sh" train_step_bench >/dev/null

# name|model|batch and sequence|warm-up and timed steps
configs=(
  "toy|--n-layer 2 --n-head 2 --d-model 64 --vocab 256|--batch 2 --seq 32|--warmup 1 --steps 2"
  "124m|--n-layer 12 --n-head 12 --d-model 768 --vocab 50257|--batch 4 --seq 128|--warmup 1 --steps 3"
  "llama-350m|--arch llama --n-layer 24 --n-head 16 --kv-heads 8 --d-model 1024 --vocab 32000|--batch 4 --seq 128|--warmup 1 --steps 2"
)
wanted=("$@")
((${#wanted[@]})) || wanted=(124m)

# shellcheck source=bench/torch_peer.bash
source "$root/bench/torch_peer.bash"
check_cpu_and_peer "$threads"

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
for name in "${wanted[@]}"; do
  row="$(config_row "$name")"
  IFS='|' read -r _ model shape steps <<<"$row"
  for ((round = 0; round < ${REPEATS:-3}; round++)); do
    for mode in full lora; do
      lora=(--lora-rank 0)
      [[ "$mode" == lora ]] &&
        lora=(--lora-rank "$rank" --lora-dropout "$dropout" --lora-quantize "$quantize")
      "$build/bench/train_step_bench" $model $shape $steps --threads "$threads" "${lora[@]}" |
        sed -n "s/^RESULT /$name ours $mode /p" >>"$results"
      if ((peer_ok)); then
        bash "$root/bench/torch_env.sh" "$root/bench/torch_train_peer.py" $model $shape $steps \
          --threads "$threads" "${lora[@]}" |
          sed -n "s/^RESULT /$name peer $mode /p" >>"$results"
      fi
    done
  done
done

python3 - "$results" "$rank" "$dropout" "$quantize" "${wanted[@]}" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    name, side, mode, payload = line.split(" ", 3)
    r = json.loads(payload)
    best = rows.setdefault(name, {}).setdefault((side, mode), r)
    if r["tokens_per_s"] > best["tokens_per_s"]:
        rows[name][(side, mode)] = r
dropout = f", dropout {sys.argv[3]}" if float(sys.argv[3]) > 0 else ""
frozen = ", frozen block matrices in q8_0" if sys.argv[4] == "q8_0" else ""
print(f"f32, LoRA rank {sys.argv[2]} on attention and MLP{dropout}{frozen}; model state: "
      "parameters, gradients and AdamW moments held")
print(f"{'config':<11} {'mode':<5} {'trained':>12} {'model state':>12} {'ours tok/s':>10} "
      f"{'torch tok/s':>11} {'ours/torch':>10}")
for name in sys.argv[5:]:
    r = rows[name]
    for mode in ("full", "lora"):
        ours, peer = r[("ours", mode)], r.get(("peer", mode))
        ratio = f"{ours['tokens_per_s'] / peer['tokens_per_s']:10.2f}" if peer else f"{'-':>10}"
        torch_cell = f"{peer['tokens_per_s']:11.1f}" if peer else f"{'-':>11}"
        print(f"{name:<11} {mode:<5} {ours['trained_params']:12d} "
              f"{ours['model_state_bytes'] / 2**20:8.1f} MiB {ours['tokens_per_s']:10.1f} "
              f"{torch_cell} {ratio}")
    full, lora = r[("ours", "full")], r[("ours", "lora")]
    peer_gain = ""
    if ("peer", "full") in r and ("peer", "lora") in r:
        peer_gain = (f", torch {r[('peer', 'lora')]['tokens_per_s'] / r[('peer', 'full')]['tokens_per_s']:.2f}x"
                     f" ({r[('peer', 'lora')]['model_state_bytes'] / 2**20:.1f} MiB)")
    print(f"{name:<11} lora/full: ours {lora['tokens_per_s'] / full['tokens_per_s']:.2f}x tokens/s, "
          f"{lora['model_state_bytes'] / full['model_state_bytes']:.3f}x model state{peer_gain}")
PY
