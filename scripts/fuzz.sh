#!/usr/bin/env bash
# Builds the fuzz targets of fuzz/ with the sanitizer build (scripts/sanitizer_build.sh: clang's
# libFuzzer, ASan + UBSan) and runs each for a while on a corpus kept in
# build-sanitize/fuzz/corpus/<target>; a crash fails the script.
#   scripts/fuzz.sh [SECONDS]     (default: each target's own time, 15-30 s)
#   FUZZ_TARGETS="shard_reader_fuzz" scripts/fuzz.sh 10
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-sanitize/fuzz

# target | seconds: the readers of bigger formats get longer.
targets=(
  "shard_reader_fuzz|25"
  "vocab_reader_fuzz|30"
  "toml_config_fuzz|15"
  "manifest_fuzz|15"
  "safetensors_fuzz|25"
  "hardware_catalog_fuzz|15"
  "openai_request_fuzz|15"
  "json_schema_fuzz|15"
  "chat_template_fuzz|15"
  "chat_example_fuzz|15"
  "http_request_fuzz|25"
  "peft_config_fuzz|10"
  "hf_config_fuzz|10"
  "gguf_fuzz|20"
)

# Valid inputs to start from, so the fuzzer explores past the first checks quickly.
seed() {
  local target=$1 dir=$2
  case $target in
    shard_reader_fuzz)
      python3 - "$dir" <<'PY'
import struct, sys, zlib
def shard(tokens, vocab):
    width = 2 if vocab <= 65536 else 4
    payload = b"".join(struct.pack("<H" if width == 2 else "<I", t) for t in tokens)
    head = b"TSRASHRD" + struct.pack("<IIII", 1, 48, width, zlib.crc32(payload))
    head += struct.pack("<QQ", vocab, len(tokens))
    return head + struct.pack("<II", zlib.crc32(head), 0) + payload
for name, tokens, vocab in [("u16", [0, 1, 2, 255, 7], 256), ("u32", [70000, 3], 70001),
                            ("empty", [], 4096)]:
    open(f"{sys.argv[1]}/{name}.bin", "wb").write(shard(tokens, vocab))
PY
      ;;
    vocab_reader_fuzz)
      # The first byte picks the reader: 3 is Hugging Face's tokenizer.json.
      python3 - "$dir" <<'PY'
import json, sys
printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
code = {b: chr(b) for b in printable}
code.update({b: chr(256 + i) for i, b in enumerate(b for b in range(256) if b not in code)})
vocab = {code[b]: b for b in range(256)}
vocab.update({"ab": 256, "abc": 257})
llama3 = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "behavior": "Isolated", "invert": False, "pattern": {"Regex":
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
for name, split in [("llama3", llama3), ("gpt2", gpt2)]:
    tokenizer = {"added_tokens": [{"id": 258, "content": "<|end_of_text|>", "special": True}],
                 "pre_tokenizer": split,
                 "model": {"type": "BPE", "vocab": vocab, "merges": ["a b", ["ab", "c"]]}}
    open(f"{sys.argv[1]}/hf-{name}.json", "wb").write(b"\x03" + json.dumps(tokenizer).encode())
PY
      ;;
    toml_config_fuzz) cp configs/*.toml "$dir"/ ;;
    hardware_catalog_fuzz) cp configs/hardware.toml "$dir"/ ;;
    openai_request_fuzz)
      echo '{"model": "tiny", "prompt": "In the", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "stop": ["\n"], "logprobs": 2, "stream": true, "stream_options": {"include_usage": true}, "seed": 3}' >"$dir/completion.json"
      echo '{"model": "tiny", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_completion_tokens": 4, "logprobs": true, "top_logprobs": 2}' >"$dir/chat.json"
      echo '{"model": "tiny", "prompt": [72, 105], "min_p": 0.1, "repetition_penalty": 1.2}' >"$dir/tokens.json"
      ;;
    json_schema_fuzz)
      # Schemas of each kind, each with a value after the NUL byte.
      printf '{"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"type":["integer","null"]},"c":{"type":"array","items":{"enum":["x","xy",1]},"maxItems":2}},"required":["a"]}\0{"a":"hi","b":-12,"c":["xy"]}' >"$dir/object.json"
      printf '{"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/n"}}}}}}\0{"k":[{"k":[]}]}' >"$dir/recursive.json"
      printf '{"anyOf":[{"type":"object","properties":{"x":{"const":true}}},{"type":"object"}]}\0{"q":[1.5e3,"\\u00e9",{}]}' >"$dir/any.json"
      ;;
    chat_template_fuzz)
      # Each shipped template test's templates, with a conversation after the NUL byte.
      for template in tests/serve/chat_templates/*.jinja; do
        { cat "$template"; printf '\0[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":[{"type":"text","text":"Bye"}]}]'; } \
          >"$dir/$(basename "$template" .jinja)"
      done
      ;;
    chat_example_fuzz)
      printf '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}], "tools": []}' >"$dir/messages.json"
      printf '{"prompt": [{"role": "user", "content": "a"}], "completion": [{"role": "assistant", "content": null, "tool_calls": []}]}' >"$dir/listed.json"
      printf '{"prompt": "2+2=", "completion": "4"}' >"$dir/text.json"
      ;;
    http_request_fuzz)
      # The first byte of each input sets the read size the parser is fed in.
      printf '\x10POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 33\r\n\r\n{"model":"tiny","prompt":"In"}   ' >"$dir/post.http"
      printf '\x07POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1c\r\n{"model":"tiny","messages":[\r\n1b\r\n{"role":"user","content":"a"}]}\r\n0\r\n\r\n' >"$dir/chunked.http"
      printf '\xffGET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.0\r\nAuthorization: Bearer key\r\n\r\n' >"$dir/pipelined.http"
      ;;
    peft_config_fuzz)
      printf '{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "lora_dropout": 0.05, "bias": "none", "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "task_type": "CAUSAL_LM", "use_dora": false, "rank_pattern": {}}' >"$dir/llama.json"
      printf '{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["attn.c_attn", "mlp.c_fc"], "fan_in_fan_out": true}' >"$dir/gpt2.json"
      printf '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["self_attn.q_proj"], "layers_to_transform": [0]}' >"$dir/refused.json"
      ;;
    hf_config_fuzz)
      printf '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072, "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rms_norm_eps": 1e-05, "tie_word_embeddings": true, "hidden_act": "silu"}' >"$dir/llama-3.2.json"
      printf '{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 40960, "rope_theta": 1000000, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, "rms_norm_eps": 1e-06, "tie_word_embeddings": true}' >"$dir/qwen3.json"
      printf '{"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2, "rope_scaling": {"type": "linear", "factor": 2.0}}' >"$dir/mixtral.json"
      printf '{"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "activation_function": "gelu_new"}' >"$dir/gpt2.json"
      ;;
    gguf_fuzz)
      python3 - "$dir" <<'PY'
import struct, sys
def text(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b
def kv(key, kind, payload):
    return text(key) + struct.pack("<I", kind) + payload
def gguf(metadata, tensors, alignment=32):
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)) + b"".join(metadata)
    data, infos = b"", b""
    for name, dims, kind, raw in tensors:
        infos += text(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", kind, len(data))
        data += raw + b"\0" * (-len(raw) % alignment)
    head += infos
    return head + b"\0" * (-len(head) % alignment) + data
strings = lambda items: struct.pack("<IQ", 8, len(items)) + b"".join(text(t) for t in items)
ints = lambda items: struct.pack("<IQ", 5, len(items)) + b"".join(struct.pack("<i", i) for i in items)
u32 = lambda v: struct.pack("<I", v)
meta = [kv("general.architecture", 8, text("llama")), kv("llama.block_count", 4, u32(1)),
        kv("llama.embedding_length", 4, u32(32)), kv("llama.attention.head_count", 4, u32(2)),
        kv("llama.context_length", 4, u32(16)), kv("llama.feed_forward_length", 4, u32(32)),
        kv("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)),
        kv("tokenizer.ggml.model", 8, text("gpt2")), kv("tokenizer.ggml.pre", 8, text("gpt-2")),
        kv("tokenizer.ggml.tokens", 9, strings(["a", "b", "ab", "<|endoftext|>"])),
        kv("tokenizer.ggml.token_type", 9, ints([1, 1, 1, 3])),
        kv("tokenizer.ggml.merges", 9, strings(["a b"]))]
q4_0 = struct.pack("<H", 0x3C00) + bytes(range(16))
q8_0 = struct.pack("<H", 0x3800) + bytes(range(32))
q4_k = struct.pack("<HH", 0x3C00, 0x3400) + bytes(range(12)) + bytes(range(128))
q6_k = bytes(range(128)) + bytes(range(64)) + bytes(range(16)) + struct.pack("<H", 0x3C00)
f32 = lambda n: struct.pack(f"<{n}f", *[0.5] * n)
tensors = [("token_embd.weight", [32, 4], 2, q4_0 * 4), ("blk.0.attn_norm.weight", [32], 0, f32(32)),
           ("blk.0.attn_q.weight", [32, 32], 8, q8_0 * 32), ("blk.0.attn_k.weight", [32, 32], 8, q8_0 * 32),
           ("blk.0.attn_v.weight", [32, 32], 8, q8_0 * 32), ("blk.0.attn_output.weight", [256, 4], 12, q4_k * 4),
           ("blk.0.ffn_norm.weight", [32], 0, f32(32)), ("blk.0.ffn_gate.weight", [256, 4], 14, q6_k * 4),
           ("blk.0.ffn_up.weight", [32, 32], 1, struct.pack("<H", 0x3C00) * 1024),
           ("blk.0.ffn_down.weight", [32, 32], 30, struct.pack("<H", 0x3F80) * 1024),
           ("output_norm.weight", [32], 0, f32(32))]
open(f"{sys.argv[1]}/llama.gguf", "wb").write(gguf(meta, tensors))
open(f"{sys.argv[1]}/empty.gguf", "wb").write(gguf([], []))
PY
      ;;
    manifest_fuzz)
      # manifest_crc32 is the crc32 of the rest, dumped compactly with sorted keys.
      cat >"$dir/manifest.json" <<'JSON'
{"format": "tessera-checkpoint", "version": 2, "world_size": 1, "step": 3,
 "metadata": {"samples_consumed": 12, "optimizer_steps": 3},
 "tensors": [{"name": "wte", "shape": [4, 2], "dtype": "f32", "file": "rank-00000.bin",
              "offset": 0, "nbytes": 32, "crc32": 12345}],
 "manifest_crc32": 910857278}
JSON
      ;;
    safetensors_fuzz)
      python3 - "$dir" <<'PY'
import json, struct, sys, zlib
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data
files = {
    "f32": safetensors([("wte.weight", "F32", [2, 3], struct.pack("<6f", 1, -2, 3.5, 0, 1e-3, 7)),
                        ("ln.bias", "F32", [3], struct.pack("<3f", 0.5, 0.25, -1))],
                       {"format": "pt"}),
    "halves": safetensors([("b", "BF16", [2], struct.pack("<2H", 0x3F80, 0xC040)),
                           ("h", "F16", [3], struct.pack("<3H", 0x3C00, 0x0001, 0x7C00)),
                           ("ids", "I64", [1], struct.pack("<q", 5)),
                           ("empty", "F32", [0, 4], b"")]),
    "digests": safetensors([("w", "F32", [2], struct.pack("<2f", 1, 2))],
                           {"format": "pt", "tessera.crc32": json.dumps(
                               {"w": "%08x" % zlib.crc32(struct.pack("<2f", 1, 2))},
                               separators=(",", ":"))}),
}
for name, content in files.items():
    open(f"{sys.argv[1]}/{name}.safetensors", "wb").write(content)
PY
      ;;
  esac
}

seconds_override=${1:-}
selected=${FUZZ_TARGETS:-}
chosen=()
for entry in "${targets[@]}"; do
  IFS='|' read -r target _ <<<"$entry"
  [[ -z "$selected" || " $selected " == *" $target "* ]] || continue
  if [[ ! -f fuzz/$target.cc ]]; then
    echo "fuzz: $target: fuzz/$target.cc is absent, skipped"
    continue
  fi
  chosen+=("$entry")
done

binaries=()
for entry in "${chosen[@]}"; do binaries+=("${entry%%|*}"); done
echo "fuzz: building ${#chosen[@]} targets"
mkdir -p "$out"
bash scripts/sanitizer_build.sh "${binaries[@]}" >"$out/build.log" || {
  tail -60 "$out/build.log"
  echo "fuzz: building the targets failed (log: $out/build.log)"
  exit 1
}

# Runs one target on its corpus; prints its result, and its log's end when it fails.
run_target() {
  local target=$1 seconds=$2 corpus=$out/corpus/$1
  if "$out/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/$target-" "$corpus" 2>"$out/$target.log"; then
    echo "fuzz: $target passed after $seconds s: $(grep -E '^stat::number_of_executed_units' \
      "$out/$target.log" | tail -1)"
  else
    tail -40 "$out/$target.log"
    echo "fuzz: $target FAILED (log: $out/$target.log)"
    return 1
  fi
}

# Each fuzzer is one thread: two run at a time, one per core.
running=0 failed=0
for entry in "${chosen[@]}"; do
  IFS='|' read -r target seconds <<<"$entry"
  corpus=$out/corpus/$target
  if [[ ! -d $corpus ]]; then
    mkdir -p "$corpus"
    seed "$target" "$corpus"
  fi
  echo "fuzz: running $target for ${seconds_override:-$seconds} s"
  run_target "$target" "${seconds_override:-$seconds}" &
  if ((++running >= 2)); then
    wait -n || failed=1
    ((running--))
  fi
done
while ((running > 0)); do
  wait -n || failed=1
  ((running--))
done
((failed == 0)) || { echo "fuzz: a target failed"; exit 1; }
echo "fuzz: all targets passed"
