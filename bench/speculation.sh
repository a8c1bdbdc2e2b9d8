#!/usr/bin/env bash
# Speculative decoding by prompt lookup against plain decoding, on the same trained model and the
# same two cores: tessera serve with --draft-tokens 0 and with --draft-tokens DRAFT, each under
# CLIENTS_LIST concurrent clients streaming greedy MAX_TOKENS-token completions of a prompt that
# repeats a passage and stops inside its third copy (text that repeats its prompt, as code edits,
# quotes and extraction do). The model is CONFIG trained STEPS steps on Genesis. The table gives
# decode tokens/s, the speedup over plain decoding at the same load, the share of drafted tokens
# kept and the tokens each verifying step produced, from the server's /metrics. The peer is the
# server without speculation; both give the same tokens (tests/serve/engine_test.cc).
#   [CONFIG=configs/gpt2-124m.toml] [STEPS=40] [DRAFT=4] [CLIENTS_LIST="1 8"] [DURATION=15]
#   [MAX_TOKENS=64] [BUILD=dir] bench/speculation.sh
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
passage="And God said, Let there be light: and there was light. And God saw the light, that it was good."
prompt="$passage $passage And God said, Let there be"
echo "model: $config trained ${STEPS:-40} steps, served in f32; greedy ${MAX_TOKENS:-64}-token completions"
echo

# Serves with --draft-tokens $1 under $2 clients; prints tokens/s, kept share, tokens per verify.
serve_and_load() {
  start_server "$work/serve.log" "$tessera" serve --threads 2 --checkpoint "$work/run" --port 0 \
    --draft-tokens "$1"
  node "$root/bench/serve_load.mjs" --url "$server_url" --clients "$2" \
    --duration "${DURATION:-15}" --max-tokens "${MAX_TOKENS:-64}" --temperature 0 \
    --prompt "$prompt" >"$work/load.txt"
  curl -sf "$server_url/metrics" >"$work/metrics.txt"
  stop_server
  python3 - "$work/load.txt" "$work/metrics.txt" <<'PY'
import re, sys
load, metrics = open(sys.argv[1]).read(), open(sys.argv[2]).read()
def metric(name):
    m = re.search(r'^' + name + r'(?:\{[^}]*\})? ([0-9.e+-]+)$', metrics, re.M)
    return float(m.group(1)) if m else 0.0
drafts = metric('tessera_spec_decode_drafts_total')
drafted = metric('tessera_spec_decode_draft_tokens_total')
kept = metric('tessera_spec_decode_accepted_tokens_total')
tokens_per_s = float(re.search(r'([0-9.]+) tokens/s', load).group(1))
share = 100 * kept / drafted if drafted else 0.0
per_verify = (drafts + kept) / drafts if drafts else 1.0
print(f'{tokens_per_s} {share} {per_verify}')
PY
}

printf '%-8s %-7s %9s %8s %7s %10s\n' clients draft "tok/s" speedup kept tok/verify
for clients in ${CLIENTS_LIST:-1 8}; do
  read -r plain _ _ < <(serve_and_load 0 "$clients")
  read -r fast share per_verify < <(serve_and_load "$draft" "$clients")
  python3 -c "
print(f'{$clients:<8} {0:<7} {$plain:9.1f} {1:8.2f} {\"-\":>7} {\"-\":>10}')
print(f'{$clients:<8} {$draft:<7} {$fast:9.1f} {$fast / $plain:8.2f} {$share:6.1f}% {$per_verify:10.2f}')"
done
echo
echo "speedup: tokens/s with drafts over tokens/s without, at the same load; kept: drafted tokens"
echo "equal to the token their position sampled; tok/verify: tokens one verifying step produced."
