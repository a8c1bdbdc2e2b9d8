#!/usr/bin/env bash
# Served LoRA adapters under load: one `tessera serve` holding three adapters (--lora), loaded by
# bench/serve_load.mjs twice, every client asking the model, then the clients spread round robin
# over the model and its three adapters, each in the same batches as the others (per-row adapter
# segments). Prints output tokens/s of both and their ratio, with the CPU. The model is CONFIG
# (default configs/gpt2-124m.toml) trained STEPS steps (default 2) on Genesis 1-10 and exported;
# the adapters are LoRA runs of rank RANK (default 16) on its attention and MLP, ADAPTER_STEPS
# steps each (default 2; their values matter less than their shapes here). No peer server runs
# here to compare with: it prints Tessera's numbers alone. Builds nothing.
#   [CONFIG=toml] [CLIENTS=N] [DURATION=s] [MAX_TOKENS=N] [RANK=R] bench/serve_lora.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
tessera="$build/tessera"
[[ -x "$tessera" ]] || { echo "no tessera binary at $tessera: run scripts/build.sh or set BUILD" >&2; exit 2; }
command -v node >/dev/null || { echo "node is missing: run scripts/setup.sh --test" >&2; exit 2; }
# shellcheck source=bench/serve_process.bash
source "$root/bench/serve_process.bash"
config="${CONFIG:-$root/configs/gpt2-124m.toml}"
small="--set train.batch_size=2 --set train.seq_len=64"
# shellcheck disable=SC2086
setup_served_model "$config" --set train.steps="${STEPS:-2}" $small
"$tessera" convert export --checkpoint "$work/run" --out "$work/hf" >/dev/null
rank="${RANK:-16}"
loras=()
for name in a b c; do
  # shellcheck disable=SC2086
  "$tessera" train --config "$work/hf" --data "$work/corpus.txt" --out "$work/$name" $small \
    --set train.steps="${ADAPTER_STEPS:-2}" --set train.eval_every=0 --set train.eval_batches=1 \
    --set train.lora_rank="$rank" --set train.seed="$RANDOM" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; exit 1; }
  loras+=(--lora "$name=$work/$name")
done
start_server "$work/serve.log" "$tessera" serve --checkpoint "$work/hf" --port 0 "${loras[@]}"
sed -n '2p' "$work/serve.log"

tokens_per_s() {  # the clients' output tokens/s of a load run by serve_load.mjs --model "$1"
  node "$root/bench/serve_load.mjs" --url "$server_url" --clients "${CLIENTS:-16}" \
    --duration "${DURATION:-20}" --max-tokens "${MAX_TOKENS:-32}" --temperature 0 --model "$1" \
    >"$work/load.txt"
  sed -n 's/^output tokens .* = *\([0-9.]*\) tokens\/s.*/\1/p' "$work/load.txt"
}
base=$(tokens_per_s hf)
mixed=$(tokens_per_s hf,a,b,c)
stop_server
echo "LoRA rank $rank on attention and MLP, ${CLIENTS:-16} clients, ${MAX_TOKENS:-32} tokens each"
printf '%-32s %10s\n' "requests" "tokens/s"
printf '%-32s %10.1f\n' "the model alone" "$base"
printf '%-32s %10.1f\n' "the model and 3 adapters, mixed" "$mixed"
python3 -c "print(f'mixed / model alone: {float(\"$mixed\") / float(\"$base\"):.2f}')"
