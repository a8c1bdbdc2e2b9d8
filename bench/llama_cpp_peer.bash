# What the benchmarks that run llama.cpp beside Tessera share (bench/llama_cpp.sh,
# bench/kv_cache.sh source this file, after setting root and build): llama.cpp's own tools built
# from the source node-llama-cpp bundles, and one training step of a byte-level Llama so that a
# real checkpoint exists.

# Builds the llama.cpp tools named (llama-bench, llama-quantize) and sets llama_<tool> to each
# one's path (llama_bench, llama_quantize), and peer to 1; without node-llama-cpp, says so and
# sets peer to 0.
find_llama_cpp() {
  peer=1
  local tool path
  for tool in "$@"; do
    if ! path=$(bash "$root/tests/llama_cpp/build_tool.sh" "$tool" "$build/llama.cpp"); then
      peer=0
      echo "llama.cpp left out: tests/llama_cpp/node_modules has no node-llama-cpp" \
        "(scripts/setup.sh --bench installs it); only Tessera is measured"
      return
    fi
    printf -v "${tool//-/_}" '%s' "$path"
  done
}

# Trains one step of the n_layer x d_model Llama (n_head heads, ffn_hidden ffn, contexts of
# MAX_SEQ) on the README and the docs into DIR/run, exporting it as GGUF f32 to DIR/model-f32.gguf.
one_step_llama() {
  local dir=$1 max_seq=$2
  cat "$root/README.md" "$root"/docs/*.md >"$dir/corpus.txt"
  "$build/tessera" train --data "$dir/corpus.txt" --out "$dir/run" --set model.arch=llama \
    --set model.n_layer="$n_layer" --set model.n_head="$n_head" --set model.d_model="$d_model" \
    --set model.ffn_hidden="$ffn" --set model.max_seq="$max_seq" --set train.batch_size=1 \
    --set train.seq_len=64 --set train.steps=1 --set train.eval_every=0 >/dev/null
  "$build/tessera" convert export --format gguf --dtype f32 --checkpoint "$dir/run" \
    --out "$dir/model-f32.gguf" >/dev/null
}
