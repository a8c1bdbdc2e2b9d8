#!/usr/bin/env bash
# Speculative decoding against plain decoding, on the same trained model and the same two cores:
# tessera serve with --draft-tokens 0, with --draft-tokens DRAFT by prompt lookup, and with
# --draft-tokens DRAFT by a draft model (--draft: CONFIG with the DRAFT_MODEL settings, about an
# eighth of GPT-2 124M's parameters, trained the same STEPS steps on the same text), each under
# CLIENTS_LIST concurrent clients streaming greedy MAX_TOKENS-token completions. Prompt lookup and
# plain decoding continue a prompt that repeats a passage and stops inside its third copy (text
# that repeats its prompt, as code edits, quotes and extraction do); the draft model and plain
# decoding continue a verse opening. The model is CONFIG trained STEPS steps on Genesis. The table
# gives decode tokens/s, the speedup over plain decoding of the same prompt at the same load, the
# share of drafted tokens kept and the tokens each verifying step produced, from the server's
# /metrics. The peer is the server without speculation; all give the same tokens
# (tests/serve/engine_test.cc).
#   [CONFIG=configs/gpt2-124m.toml] [STEPS=40] [DRAFT=4] [CLIENTS_LIST="1 8"] [DURATION=15]
#   [MAX_TOKENS=64] [DRAFT_MODEL="--set model.d_model=256 ..."] [BUILD=dir] bench/speculation.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
tessera="$build/tessera"
[[ -x "$tessera" ]] || bash "$root/scripts/build.sh" >/dev/null
command -v node >/dev/null || { echo "node is missing: run scripts/setup.sh --test" >&2; exit 2; }
config="${CONFIG:-$root/configs/gpt2-124m.toml}"
draft=${DRAFT:-4}

# shellcheck source=bench/serve_process.bash
source "$root/bench/serve_process.bash"
setup_served_model "$config" --set train.steps="${STEPS:-40}" --set train.batch_size=4 \
  --set train.seq_len=128 --set train.grad_accum=1
# shellcheck disable=SC2206
draft_model=(${DRAFT_MODEL:---set model.d_model=256 --set model.n_layer=3 --set model.n_head=4})
"$tessera" train --config "$config" --data "$work/corpus.txt" --out "$work/draft" \
  --set train.eval_every=0 --set train.eval_batches=1 --set train.steps="${STEPS:-40}" \
  --set train.batch_size=4 --set train.seq_len=128 --set train.grad_accum=1 "${draft_model[@]}" \
  >"$work/draft.log" 2>&1 || { cat "$work/draft.log" >&2; exit 1; }
passage="And God said, Let there be light: and there was light. And God saw the light, that it was good."
repeating="$passage $passage And God said, Let there be"
opening="And God said unto Noah"
echo "model: $config trained ${STEPS:-40} steps, served in f32; greedy ${MAX_TOKENS:-64}-token completions"
for log in train draft; do
  echo "${log/train/target}: $(sed -n 's/.*model: \(.*\), \([0-9.]*M parameters\).*/\1, \2/p' "$work/$log.log")"
done
echo

# Serves with --draft-tokens $1 (and the draft model when $3 is "model") under $2 clients,
# continuing $4; prints tokens/s, kept share, tokens per verify.
serve_and_load() {
  local draft_flags=()
  [[ "$3" == model ]] && draft_flags=(--draft "$work/draft")
  start_server "$work/serve.log" "$tessera" serve --threads 2 --checkpoint "$work/run" --port 0 \
    --draft-tokens "$1" "${draft_flags[@]}"
  load_and_scrape "$2" --max-tokens "${MAX_TOKENS:-64}" --temperature 0 --prompt "$4"
  PYTHONPATH="$root/bench" python3 - "$work/load.txt" "$work/metrics.txt" <<'PY'
import sys
from served_figures import Served
s = Served(sys.argv[1], sys.argv[2])
drafts = s.metric('tessera_spec_decode_drafts_total')
drafted = s.metric('tessera_spec_decode_draft_tokens_total')
kept = s.metric('tessera_spec_decode_accepted_tokens_total')
share = 100 * kept / drafted if drafted else 0.0
per_verify = (drafts + kept) / drafts if drafts else 1.0
print(f'{s.tokens_per_s} {share} {per_verify}')
PY
}

printf '%-8s %-10s %-7s %9s %8s %7s %10s\n' clients prompt draft "tok/s" speedup kept tok/verify
for clients in ${CLIENTS_LIST:-1 8}; do
  for case in "repeating lookup" "opening model"; do
    read -r name by <<<"$case"
    text=$repeating
    [[ $name == opening ]] && text=$opening
    read -r plain _ _ < <(serve_and_load 0 "$clients" none "$text")
    read -r fast share per_verify < <(serve_and_load "$draft" "$clients" "$by" "$text")
    python3 -c "
print(f'{$clients:<8} {\"$name\":<10} {\"none\":<7} {$plain:9.1f} {1:8.2f} {\"-\":>7} {\"-\":>10}')
print(f'{$clients:<8} {\"$name\":<10} {\"$by\":<7} {$fast:9.1f} {$fast / $plain:8.2f} {$share:6.1f}% {$per_verify:10.2f}')"
  done
done
echo
echo "draft: none, prompt lookup or the draft model, $draft tokens per step; speedup: tokens/s with"
echo "drafts over tokens/s without, same prompt and load; kept: drafted tokens equal to the token"
echo "their position sampled; tok/verify: tokens one verifying step produced."
