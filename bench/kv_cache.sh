#!/usr/bin/env bash
# Decoding deep in a context with the KV cache in f32 and in q8_0, beside llama.cpp with its f16
# and q8_0 caches on the same weights: trains one step of an 85M-parameter Llama (12 x 768, ffn
# 2048, byte vocabulary, contexts of 2304) so that a real checkpoint exists, exports it as GGUF
# f32, and times batch-1 decoding of 64 tokens after a 2048-token prompt: Tessera's
# bench/decode_bench (f32 weights) with --kv-dtype f32 and q8_0, and llama.cpp's own llama-bench
# (built as bench/llama_cpp.sh builds it) with -d 2048 and -ctk/-ctv f16 and q8_0 (flash attention
# on, which its quantised V cache needs). Prints the bytes a cached token takes in each. Each side
# runs REPEATS rounds (default 3), alternating, and keeps its best. SMOKE=1 takes a 2 x 64 Llama
# and a 128-token context instead, to check in seconds that the benchmark runs.
#   [REPEATS=N] [THREADS=N] [BUILD=dir] [INSTALL=0] [SMOKE=1] bench/kv_cache.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
threads="${THREADS:-2}" steps=64 depth=2048
n_layer=12 d_model=768 n_head=12 ffn=2048
[[ "${SMOKE:-0}" == 1 ]] && n_layer=2 d_model=64 n_head=2 ffn=128 depth=128 steps=8
[[ "${INSTALL:-1}" == 0 ]] || bash "$root/scripts/setup.sh" --bench
[[ -x "$build/tessera" && -x "$build/bench/decode_bench" ]] ||
  bash "$root/scripts/build.sh" tessera_cli decode_bench >/dev/null

source "$root/bench/llama_cpp_peer.bash"
find_llama_cpp llama-bench

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
one_step_llama "$work" $((depth + 256))

results="$work/results"
for ((i = 0; i < ${REPEATS:-3}; i++)); do
  for dtype in f32 q8_0; do
    "$build/bench/decode_bench" --checkpoint "$work/run" --formats f32 --prompt "$depth" \
      --steps "$steps" --repeats 1 --threads "$threads" --kv-dtype "$dtype" |
      sed -n "s/^RESULT /ours $dtype /p" >>"$results"
  done
  ((peer)) || continue
  for dtype in f16 q8_0; do
    "$llama_bench" -m "$work/model-f32.gguf" -t "$threads" -p 0 -n "$steps" -d "$depth" -r 1 \
      -fa on -ctk "$dtype" -ctv "$dtype" -o jsonl 2>/dev/null | sed "s/^/peer $dtype /" >>"$results"
  done
done

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_int8' \
    /proc/cpuinfo | sort -u | tr '\n' ' ')"
python3 - "$results" "$steps" "$depth" "$n_layer" "$d_model" <<'PY'
import json, sys
path, steps, depth, layers, width = sys.argv[1], *map(int, sys.argv[2:])
values = 2 * layers * width  # keys and values of every layer
ours, peer = {}, {}
for line in open(path):
    side, dtype, payload = line.split(" ", 2)
    r = json.loads(payload)
    if side == "ours":
        ours[dtype] = max(ours.get(dtype, 0), r["formats"]["f32"]["tokens_per_s"])
    else:
        peer[dtype] = max(peer.get(dtype, 0), r["avg_ts"])
bytes_per_token = {"f32": 4 * values, "f16": 2 * values, "q8_0": values // 32 * 34}
print(f"{layers} x {width} Llama, batch-1 decode of {steps} tokens after a {depth}-token prompt, tokens/s, "
      "best of each side; KV bytes per token in brackets")
print(f"{'cache':<6} {'ours':>9} {'ratio to f32':>12} {'llama.cpp cache':>16} {'llama.cpp':>10} "
      f"{'ours/llama.cpp':>14}")
for mine, theirs in (("f32", "f16"), ("q8_0", "q8_0")):
    p = peer.get(theirs)
    versus = f"{p:10.1f} {ours[mine] / p:14.2f}" if p else f"{'-':>10} {'-':>14}"
    print(f"{mine:<6} {ours[mine]:9.1f} {ours[mine] / ours['f32']:12.2f} "
          f"{theirs + ' [' + str(bytes_per_token[theirs]) + ']':>16} {versus}  "
          f"(ours [{bytes_per_token[mine]}])")
PY
