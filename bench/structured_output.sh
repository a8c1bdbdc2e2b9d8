#!/usr/bin/env bash
# Structured outputs against free text, on the same trained model and the same two cores: tessera
# serve under CLIENTS_LIST concurrent clients streaming MAX_TOKENS-token completions, first free,
# then held to a JSON schema (response_format json_schema: nested objects, an array, an enum,
# numbers, bounded strings). The model is CONFIG trained STEPS steps on Genesis with a 50,257-token
# vocabulary. The table gives decode tokens/s and its ratio to free text at the same load, and
# from the server's /metrics the milliseconds spent finding and applying each token's mask, the
# share of a model step they add (masks per step x mask time over step time), how many grammar
# states had their masks computed rather than found kept and the milliseconds each such state took.
# The peer is the same server unconstrained.
#   [CONFIG=configs/gpt2-124m.toml] [STEPS=40] [CLIENTS_LIST="1 8"] [DURATION=15]
#   [MAX_TOKENS=64] [BUILD=dir] bench/structured_output.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
tessera="$build/tessera"
[[ -x "$tessera" ]] || bash "$root/scripts/build.sh" >/dev/null
command -v node >/dev/null || { echo "node is missing: run scripts/setup.sh --test" >&2; exit 2; }
config="${CONFIG:-$root/configs/gpt2-124m.toml}"

# shellcheck source=bench/serve_process.bash
source "$root/bench/serve_process.bash"
setup_served_model "$config" --set train.steps="${STEPS:-40}" --set train.batch_size=4 \
  --set train.seq_len=128 --set train.grad_accum=1
format='{"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": {
  "type": "object", "additionalProperties": false,
  "required": ["name", "age", "city", "tags", "kind"],
  "properties": {
    "name": {"type": "string", "maxLength": 24},
    "age": {"type": "integer"},
    "city": {"type": "object", "required": ["name", "lat", "lon"], "additionalProperties": false,
             "properties": {"name": {"type": "string", "maxLength": 24},
                            "lat": {"type": "number"}, "lon": {"type": "number"}}},
    "tags": {"type": "array", "maxItems": 4, "items": {"type": "string", "maxLength": 12}},
    "kind": {"enum": ["prophet", "king", "shepherd", "other"]}}}}}'
echo "model: $config trained ${STEPS:-40} steps, served in f32; sampled ${MAX_TOKENS:-64}-token completions"
echo

# Serves under $1 clients, free when $2 is empty, else with response_format $2; prints tokens/s,
# then mask ms per token, model step ms, masks per step, masks computed and ms per computed mask.
serve_and_load() {
  start_server "$work/serve.log" "$tessera" serve --threads 2 --checkpoint "$work/run" --port 0
  load_and_scrape "$1" --max-tokens "${MAX_TOKENS:-64}" ${2:+--response-format "$2"}
  PYTHONPATH="$root/bench" python3 - "$work/load.txt" "$work/metrics.txt" <<'PY'
import sys
from served_figures import Served
s = Served(sys.argv[1], sys.argv[2])
masked = s.metric('tessera_structured_output_tokens_total')
steps = s.metric('tessera_model_steps_total')
mask_ms = 1000 * s.metric('tessera_structured_output_mask_seconds_total') / masked if masked else 0
step_ms = 1000 * s.metric('tessera_model_step_seconds_total') / steps
computed = s.metric('tessera_structured_output_masks_computed_total')
compute_s = s.metric('tessera_structured_output_mask_compute_seconds_total')
compute_ms = 1000 * compute_s / computed if computed else 0
print(f"{s.tokens_per_s} {mask_ms} {step_ms} {masked / steps} {computed:.0f} {compute_ms}")
PY
}

printf '%-8s %-7s %9s %7s %9s %9s %9s %9s %11s\n' clients format "tok/s" ratio "mask ms" "step ms" \
  "overhead" computed "ms/computed"
for clients in ${CLIENTS_LIST:-1 8}; do
  read -r free _ free_step _ _ _ < <(serve_and_load "$clients" "")
  read -r held mask_ms step_ms per_step computed compute_ms < <(serve_and_load "$clients" "$format")
  python3 -c "
print(f'{$clients:<8} {\"text\":<7} {$free:9.1f} {1:7.2f} {\"-\":>9} {$free_step:9.2f} {\"-\":>9} {\"-\":>9} {\"-\":>11}')
print(f'{$clients:<8} {\"schema\":<7} {$held:9.1f} {$held / $free:7.2f} {$mask_ms:9.3f} {$step_ms:9.2f}' +
      f' {100 * $mask_ms * $per_step / $step_ms:8.1f}% {$computed:9.0f} {$compute_ms:11.2f}')"
done
echo
echo "ratio: tokens/s held to the schema over free text at the same load; mask ms: per token,"
echo "finding its grammar state's mask (computed once per state, then kept) and applying it to the"
echo "logits; overhead: masks per step x mask ms over the model step's ms; computed: grammar states"
echo "whose masks were computed, each taking ms/computed the first time it was reached."
