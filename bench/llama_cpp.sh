#!/usr/bin/env bash
# Tessera beside llama.cpp on the same weights: trains one step of an 85M-parameter Llama
# (12 x 768, ffn 2048, byte vocabulary) so that a real checkpoint exists, exports it as GGUF f32,
# f16 and q8_0, and times batch-1 decode and a 512-token prefill in Tessera (bench/decode_bench
# --checkpoint: f32, bf16, int8 weights) and in llama.cpp (node-llama-cpp's prebuilt CPU build,
# bench/llama_cpp_peer.mjs). Each side runs REPEATS rounds (default 2), alternating, and keeps its
# best. llama.cpp runs with its defaults (f16 KV cache, flash attention as it chooses) at 1 and at
# THREADS threads and keeps the better of the two for each figure: through node-llama-cpp on a
# 2-core machine its 2-thread decode is often slower than 1 thread.
#   [REPEATS=N] [STEPS=N] [THREADS=N] [BUILD=dir] bench/llama_cpp.sh
# Needs tests/llama_cpp/node_modules (scripts/setup.sh --test installs it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
steps="${STEPS:-64}" threads="${THREADS:-2}" prefill=512
[[ -x "$build/tessera" && -x "$build/bench/decode_bench" ]] ||
  bash "$root/scripts/build.sh" tessera_cli decode_bench >/dev/null
if [[ ! -d "$root/tests/llama_cpp/node_modules/node-llama-cpp" ]]; then
  echo "error: llama.cpp's npm package is missing: run scripts/setup.sh --test" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat "$root/README.md" "$root"/docs/*.md >"$work/corpus.txt"
"$build/tessera" train --data "$work/corpus.txt" --out "$work/run" --set model.arch=llama \
  --set model.n_layer=12 --set model.n_head=12 --set model.d_model=768 \
  --set model.ffn_hidden=2048 --set model.max_seq=1024 --set train.batch_size=1 \
  --set train.seq_len=64 --set train.steps=1 --set train.eval_every=0 >/dev/null
for dtype in f32 f16 q8_0; do
  "$build/tessera" convert export --format gguf --dtype "$dtype" --checkpoint "$work/run" \
    --out "$work/model-$dtype.gguf" >/dev/null
done

results="$work/results"
for ((i = 0; i < ${REPEATS:-2}; i++)); do
  "$build/bench/decode_bench" --checkpoint "$work/run" --formats f32,bf16,int8 --prompt 8 \
    --steps "$steps" --prefill "$prefill" --repeats 2 --copy-mib 256 --threads "$threads" |
    sed -n 's/^RESULT /ours /p' >>"$results"
  for dtype in f32 f16 q8_0; do
    for peer_threads in 1 "$threads"; do
      node "$root/bench/llama_cpp_peer.mjs" "$work/model-$dtype.gguf" "$prefill" "$steps" 2 \
        "$peer_threads" | sed -n "s/^RESULT /peer $dtype $peer_threads /p" >>"$results"
    done
  done
done

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
"$build/tessera" --version | sed -n 3,4p
python3 - "$results" "$steps" "$prefill" <<'PY'
import json, sys
path, steps, prefill = sys.argv[1], sys.argv[2], sys.argv[3]
ours, peer = {}, {}
for line in open(path):
    parts = line.split(" ", 3)
    if parts[0] == "ours":
        for name, f in json.loads(line.split(" ", 1)[1])["formats"].items():
            best = ours.setdefault(name, {"decode": 0, "prefill": 0})
            best["decode"] = max(best["decode"], f["tokens_per_s"])
            best["prefill"] = max(best["prefill"], f["prefill_tokens_per_s"])
    else:
        _, dtype, threads, payload = parts
        r = json.loads(payload)
        best = peer.setdefault(dtype, {"decode": (0, 0), "prefill": (0, 0)})
        best["decode"] = max(best["decode"], (r["tokens_per_s"], int(threads)))
        best["prefill"] = max(best["prefill"], (r["prefill_tokens_per_s"], int(threads)))
print(f"85M Llama, batch-1 decode ({steps} steps after an 8-token prompt) and a {prefill}-token "
      "prefill, tokens/s, best of each side; llama.cpp's thread count in brackets")
print(f"{'Tessera':<8} {'llama.cpp':<10} {'decode ours':>11} {'llama.cpp':>13} {'ratio':>6} "
      f"{'prefill ours':>12} {'llama.cpp':>13} {'ratio':>6}")
for name, dtype in (("f32", "f32"), ("bf16", "f16"), ("int8", "q8_0")):
    o, p = ours[name], peer[dtype]
    print(f"{name:<8} {dtype:<10} {o['decode']:11.1f} {p['decode'][0]:9.1f} [{p['decode'][1]}] "
          f"{o['decode'] / p['decode'][0]:6.2f} {o['prefill']:12.1f} {p['prefill'][0]:9.1f} "
          f"[{p['prefill'][1]}] {o['prefill'] / p['prefill'][0]:6.2f}")
PY
