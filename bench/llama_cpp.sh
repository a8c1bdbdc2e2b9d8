#!/usr/bin/env bash
# Tessera beside llama.cpp on the same weights: trains one step of an 85M-parameter Llama
# (12 x 768, ffn 2048, byte vocabulary; N_LAYER, D_MODEL, N_HEAD and FFN choose another size) so
# that a real checkpoint exists, exports it as GGUF f32, f16 and q8_0 and has llama.cpp's own
# llama-quantize make Q4_0 and Q4_K_M of the f32 file, and times batch-1 decode and a 512-token
# prefill in Tessera (bench/decode_bench --checkpoint: f32, bf16, int8, q4_0 and q4_k weights) and
# in llama.cpp's own llama-bench on the GGUF files. Q4_K_M keeps the output matrix and some of
# the value and MLP output matrices in Q6_K; Tessera's q4_k keeps its head in int8 and the rest in
# Q4_K, and the table prints the weight bytes a token reads on each side. It prints the last-level cache beside the 4-bit weights:
# decoding a model that fits in it measures the cache, not memory.
# llama-bench and llama-quantize are compiled from the llama.cpp source that the npm package
# node-llama-cpp (pinned in tests/llama_cpp) bundles, against the CPU libraries it ships
# (tests/llama_cpp/build_tool.sh), and
# runs with llama.cpp's defaults (f16 KV cache, flash attention as it chooses) at 1 and THREADS
# threads; each figure keeps its better thread count. Each side runs REPEATS rounds (default 3),
# alternating, and keeps its best. Installs what is missing first (scripts/setup.sh --bench),
# unless INSTALL=0: without node-llama-cpp, llama.cpp is then left out, and said so. SMOKE=1 takes
# a 2 x 64 Llama and a 64-token prefill instead, to check in seconds that the benchmark runs.
# INIT=1 skips the training step and exports the model freshly initialised (`convert export
# --config`), for sizes one training step does not fit in memory; FORMATS picks Tessera's formats
# (and with them llama.cpp's files), e.g. FORMATS=q4_0,q4_k for a model whose f32 weights would
# fill memory once per format.
#   [REPEATS=N] [STEPS=N] [THREADS=N] [BUILD=dir] [INSTALL=0] [SMOKE=1] [INIT=1]
#   [FORMATS=f32,bf16,int8,q4_0,q4_k] bench/llama_cpp.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
steps="${STEPS:-64}" threads="${THREADS:-2}"
n_layer="${N_LAYER:-12}" d_model="${D_MODEL:-768}" n_head="${N_HEAD:-12}" ffn="${FFN:-2048}"
prefill=512
[[ "${SMOKE:-0}" == 1 ]] && n_layer=2 d_model=64 n_head=2 ffn=128 prefill=64
[[ "${INSTALL:-1}" == 0 ]] || bash "$root/scripts/setup.sh" --bench
[[ -x "$build/tessera" && -x "$build/bench/decode_bench" ]] ||
  bash "$root/scripts/build.sh" tessera_cli decode_bench >/dev/null

source "$root/bench/llama_cpp_peer.bash"
modules="$root/tests/llama_cpp/node_modules"
find_llama_cpp llama-bench llama-quantize

formats="${FORMATS:-f32,bf16,int8,q4_0,q4_k}"
declare -A peer_dtype=([f32]=f32 [bf16]=f16 [int8]=q8_0 [q4_0]=q4_0 [q4_k]=q4_k_m)
peer_dtypes=()
for name in ${formats//,/ }; do
  [[ -n "${peer_dtype[$name]:-}" ]] || { echo "llama_cpp.sh: FORMATS has no format $name" >&2; exit 2; }
  peer_dtypes+=("${peer_dtype[$name]}")
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ "${INIT:-0}" == 1 ]]; then
  cat >"$work/model.toml" <<EOF
[model]
arch = "llama"
vocab_size = 256
n_layer = $n_layer
n_head = $n_head
d_model = $d_model
ffn_hidden = $ffn
max_seq = 1024
tie_embeddings = false
EOF
  "$build/tessera" convert export --format gguf --dtype f32 --config "$work/model.toml" \
    --out "$work/model-f32.gguf" >/dev/null
  source=(--config "$work/model.toml")
else
  one_step_llama "$work" 1024
  source=(--checkpoint "$work/run")
fi
for dtype in "${peer_dtypes[@]}"; do
  case "$dtype" in
    f16 | q8_0)
      "$build/tessera" convert export --format gguf --dtype "$dtype" "${source[@]}" \
        --out "$work/model-$dtype.gguf" >/dev/null ;;
    q4_0 | q4_k_m)
      if ((peer)); then
        "$llama_quantize" "$work/model-f32.gguf" "$work/model-$dtype.gguf" "${dtype^^}" \
          >/dev/null 2>&1
      fi ;;
  esac
done

results="$work/results"
for ((i = 0; i < ${REPEATS:-3}; i++)); do
  "$build/bench/decode_bench" "${source[@]}" --formats "$formats" --prompt 8 \
    --steps "$steps" --prefill "$prefill" --repeats 2 --threads "$threads" |
    sed -n 's/^RESULT /ours /p' >>"$results"
  ((peer)) || continue
  for dtype in "${peer_dtypes[@]}"; do
    "$llama_bench" -m "$work/model-$dtype.gguf" -t "1,$threads" -p "$prefill" -n "$steps" -r 2 \
      -o jsonl 2>/dev/null | sed "s/^/peer $dtype /" >>"$results"
  done
done

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni|avx_vnni|amx_bf16|amx_int8' \
    /proc/cpuinfo | sort -u | tr '\n' ' ')"
"$build/tessera" --version | sed -n 3,4p
((peer)) && echo "llama.cpp: llama-bench built from node-llama-cpp $(node -p \
  "require('$modules/node-llama-cpp/package.json').version")'s bundled source" \
  "($(node -p "require('$modules/node-llama-cpp/llama/llama.cpp.info.json').tag")), its CPU" \
  "backend: $(sed -n 's/.*"cpu_info": *"\([^"]*\)".*/\1/p' "$results" | head -1)"
python3 - "$results" "$steps" "$prefill" "$(lscpu | sed -n 's/^L3 cache: *//p')" <<'PY'
import json, sys
path, steps, prefill, llc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ours, peer, read, params = {}, {}, 0, 0
for line in open(path):
    side, rest = line.split(" ", 1)
    if side == "ours":
        r = json.loads(rest)
        read = max(read, r["limits"]["read_bandwidth"])
        params = r["parameters"]
        for name, f in r["formats"].items():
            best = ours.setdefault(name, {"decode": 0, "prefill": 0, "bytes": f["weight_bytes_per_token"]})
            best["decode"] = max(best["decode"], f["tokens_per_s"])
            best["prefill"] = max(best["prefill"], f["prefill_tokens_per_s"])
    else:
        dtype, payload = rest.split(" ", 1)
        r = json.loads(payload)
        kind = "prefill" if r["n_prompt"] else "decode"
        best = peer.setdefault(dtype, {"decode": (0, 0), "prefill": (0, 0), "bytes": r["model_size"]})
        best[kind] = max(best[kind], (r["avg_ts"], r["n_threads"]))
size = f"{params / 1e9:.2f}B" if params >= 1e9 else f"{params / 1e6:.3g}M"
print(f"{size} Llama, batch-1 decode ({steps} tokens) and a {prefill}-token prefill, "
      "tokens/s, best of each side; llama.cpp's thread count in brackets; read bandwidth "
      f"{read / 1e9:.1f} GB/s (bound: bandwidth / weight bytes per token); last-level cache "
      f"{llc}, the smallest format's weights {min(o['bytes'] for o in ours.values()) / 2**20:.1f} MiB; MiB: the "
      "matmul weights a "
      "token reads in Tessera, the file's tensors in llama.cpp")
print(f"{'Tessera':<8} {'llama.cpp':<10} {'MiB':>13} {'decode ours':>11} {'bound':>7} "
      f"{'llama.cpp':>13} {'ratio':>6} {'prefill ours':>12} {'llama.cpp':>13} {'ratio':>6}")
rows = (("f32", "f32"), ("bf16", "f16"), ("int8", "q8_0"), ("q4_0", "q4_0"), ("q4_k", "q4_k_m"))
for name, dtype in rows:
    if name not in ours:
        continue
    o, p = ours[name], peer.get(dtype)
    theirs = lambda kind: (f"{p[kind][0]:9.1f} [{p[kind][1]}] {o[kind] / p[kind][0]:6.2f}" if p
                           else f"{'-':>13} {'-':>6}")
    size = f"{o['bytes'] / 2**20:6.1f}/" + (f"{p['bytes'] / 2**20:<6.1f}" if p else f"{'-':<6}")
    print(f"{name:<8} {dtype:<10} {size:>13} {o['decode']:11.1f} {read / o['bytes']:7.1f} "
          f"{theirs('decode')} {o['prefill']:12.1f} {theirs('prefill')}")
PY
