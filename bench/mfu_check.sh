#!/usr/bin/env bash
# Checks the MFU a training run logs against FLOPs counted independently: a GPT-2 (CONFIG, default
# configs/gpt2-124m.toml: 124M, B4 T64, or BATCH x SEQ tokens) trains STEPS steps (default 20, at
# least 7: the first 5 warm up) through `tessera train`, whose metrics.jsonl gives the model FLOP/s
# it divided by its peak (mfu x peak). This script counts a step's FLOPs matmul by matmul (forward,
# and twice that backward; attention's two products over the full T x T) and multiplies them by the
# run's own tokens/s: the two rates must agree. Beside it, train_step_bench runs the same shape with
# no data pipeline, and its rate by the same count is printed too. Prints the peak, the CPU and the
# kernel path. Text is Debian's bible-kjv.
#   [CONFIG=file] [STEPS=20] [BATCH=N] [SEQ=N] [BUILD=dir] bench/mfu_check.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tessera="${BUILD:-$root/build}/tessera"
bench="${BUILD:-$root/build}/bench/train_step_bench"
config="${CONFIG:-$root/configs/gpt2-124m.toml}"
steps="${STEPS:-20}"
overrides=()
[[ -n "${BATCH:-}" ]] && overrides+=(--set train.batch_size="$BATCH")
[[ -n "${SEQ:-}" ]] && overrides+=(--set train.seq_len="$SEQ")
[[ -x "$tessera" && -x "$bench" ]] || bash "$root/scripts/build.sh" >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
command -v bible >/dev/null || { echo "SKIPPED: needs Debian's bible-kjv (bash scripts/setup.sh)"; exit 0; }
bible -f "Gen1:1-Rev22:21" | sed 's/^[^ ]* //' >"$work/kjv.txt"

lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
"$tessera" train --config "$config" --data "$work/kjv.txt" --out "$work/run" \
  --set train.steps="$steps" --set train.eval_every=0 --set train.eval_batches=1 \
  --set checkpoint.every=0 --set train.log_every="$steps" "${overrides[@]}" \
  >"$work/train.log" 2>&1 || { cat "$work/train.log" >&2; exit 1; }
grep -E "^.{11}(precision|MFU):" "$work/train.log" | sed 's/^.\{11\}//'
# The same shape, from the config the run resolved and wrote.
read -r n_layer n_head d_model vocab batch seq < <(python3 "$root/bench/config_values.py" \
  "$work/run/config.toml" model.n_layer model.n_head model.d_model model.vocab_size \
  train.batch_size train.seq_len)
"$bench" --n-layer "$n_layer" --n-head "$n_head" --d-model "$d_model" --vocab "$vocab" \
  --batch "$batch" --seq "$seq" --warmup 3 --steps 10 >"$work/bench.out"

python3 - "$work/run/metrics.jsonl" "$work/bench.out" "$n_layer" "$d_model" "$vocab" "$seq" <<'PY'
import json, statistics, sys
records = [json.loads(l) for l in open(sys.argv[1])]
run = records[0]["run"]
steps = [r for r in records if "mfu" in r and r["step"] > 5]
bench = json.loads(next(l for l in open(sys.argv[2]) if l.startswith("RESULT "))[7:])

# A GPT-2, counted GEMM by GEMM per token: q/k/v, the attention projection and the two MLP
# matmuls of each block, and the head; attention's scores and weighted sum over all T keys.
L, C, V, T = map(int, sys.argv[3:7])
per_block = 2 * (C * 3 * C + C * C + C * 4 * C + 4 * C * C)
attention = 2 * 2 * T * C  # Q K^T and A V per token and block
per_token = 3 * (L * (per_block + attention) + 2 * C * V)

mfu = statistics.median(r["mfu"] for r in steps)
tokens = statistics.median(r["tokens_per_s"] for r in steps)
logged = mfu * run["peak_flops"]
counted = per_token * tokens
print(f"peak: {run['peak_flops'] / 1e9:.1f} GFLOP/s ({run['peak']})")
print(f"FLOPs per token: the run's {run['flops_per_token'] / 1e6:.1f} M, counted here "
      f"{per_token / 1e6:.1f} M")
print(f"the run's model FLOP/s: MFU {100 * mfu:.2f}% x peak = {logged / 1e9:.1f} GFLOP/s; "
      f"counted here x its {tokens:.1f} tokens/s = {counted / 1e9:.1f} GFLOP/s; "
      f"ratio {logged / counted:.4f}")
print(f"train_step_bench, same shape, no data pipeline: {bench['tokens_per_s']:.1f} tokens/s, "
      f"{per_token * bench['tokens_per_s'] / 1e9:.1f} GFLOP/s = "
      f"{100 * per_token * bench['tokens_per_s'] / run['peak_flops']:.1f}% of the peak")
PY
