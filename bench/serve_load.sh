#!/usr/bin/env bash
# Load test of `tessera serve`: starts the server on a checkpoint, runs bench/serve_load.mjs
# against it (CLIENTS clients streaming completions for DURATION seconds; every stream checked
# to its end), stops it, prints highlights of its /metrics, then batch-1 decode speed against the
# memory-bandwidth bound (bench/decode_bench). No peer server runs here to compare with, so it
# prints Tessera's numbers alone. Builds nothing.
#   bench/serve_load.sh [CHECKPOINT]
# Without CHECKPOINT it trains configs/tiny.toml for STEPS steps (default 20) into a temp dir, on
# data/kjv.txt or, when that is absent, the King James Bible from Debian's bible-kjv (as
# scripts/quickstart.sh writes it). BUILD (default build/), CLIENTS (64), DURATION (30),
# MAX_TOKENS (64), SERVE_ARGS (more `tessera serve` flags) and DECODE_CONFIG (the model decoded at
# the end, configs/gpt2-124m.toml) override the defaults.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
tessera="$build/tessera"
[[ -x "$tessera" ]] || { echo "no tessera binary at $tessera: run scripts/build.sh or set BUILD" >&2; exit 2; }
command -v node >/dev/null || { echo "node is missing: run scripts/setup.sh --test" >&2; exit 2; }

# shellcheck source=bench/serve_process.bash
source "$root/bench/serve_process.bash"
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT

checkpoint="${1:-}"
if [[ -z "$checkpoint" ]]; then
  corpus="$root/data/kjv.txt"
  if [[ ! -s "$corpus" ]]; then
    corpus="$work/kjv.txt"
    bible -f "Gen1:1-Rev22:21" | sed 's/^[^ ]* //' >"$corpus"
  fi
  steps="${STEPS:-20}"
  echo "training configs/tiny.toml for $steps steps on $corpus"
  # Only the checkpoint is wanted: one held-out batch, not the config's eight, at each end.
  "$tessera" train --config "$root/configs/tiny.toml" --data "$corpus" --out "$work/run" \
    --set train.steps="$steps" --set train.eval_every=0 --set train.eval_batches=1 \
    >"$work/train.log" 2>&1 ||
    { cat "$work/train.log" >&2; exit 1; }
  checkpoint="$work/run"
fi

# SERVE_ARGS is split into flags on purpose.
# shellcheck disable=SC2086
start_server "$work/serve.log" "$tessera" serve --checkpoint "$checkpoint" --port 0 ${SERVE_ARGS:-}
sed -n '1,2p' "$work/serve.log"

status=0
node "$root/bench/serve_load.mjs" --url "$server_url" --clients "${CLIENTS:-64}" \
  --duration "${DURATION:-30}" --max-tokens "${MAX_TOKENS:-64}" || status=$?

echo "server /metrics:"
curl -sf "$server_url/metrics" | awk '
  /^#/ || /_bucket/ { next }
  /_seconds_sum[{ ]/ { sub(/\{.*/, "", $1); sub(/_sum$/, "", $1); sum[$1] = $2; next }
  /_seconds_count[{ ]/ { sub(/\{.*/, "", $1); sub(/_count$/, "", $1); count[$1] = $2; next }
  /^tessera_(requests_finished|generation_tokens|prompt_tokens|prefill_tokens|preemptions|http_requests)_total/ ||
  /^tessera_prefix_cache_hit_rate/ {
    print "  " $0
  }
  END {
    for (m in sum) if (count[m] > 0) printf "  %s mean %.1f ms over %d\n", m, 1000 * sum[m] / count[m], count[m]
  }' | sort
stop_server

# Batch-1 decoding of GPT-2 124M's shapes next to its memory-bandwidth bound (bench/decode.sh
# adds the PyTorch peer).
decode_bench="$build/bench/decode_bench"
if [[ -x "$decode_bench" ]]; then
  "$decode_bench" --config "${DECODE_CONFIG:-$root/configs/gpt2-124m.toml}" --steps 64 \
    --repeats 3 | grep -v '^RESULT '
fi
exit "$status"
