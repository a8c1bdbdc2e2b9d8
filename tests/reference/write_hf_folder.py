"""Writes a small Hugging Face model folder as Transformers lays one out, for Tessera's tests.

  python3 write_hf_folder.py --arch gpt2|llama|mixtral --template FILE.jinja --out DIR

The folder holds config.json with the fields Transformers writes for GPT2LMHeadModel,
LlamaForCausalLM (grouped-query attention, untied head) or MixtralForCausalLM; random weights
under Transformers' exact tensor names and shapes, in model.safetensors (Mixtral: two shards and
model.safetensors.index.json); a byte-level BPE tokenizer.json (GPT-2's split, or Llama 3's for
Llama) with the special tokens the chat template writes; tokenizer_config.json with that chat
template; and generation_config.json. Only the standard library is used.
"""

import argparse
import json
import os
import random
import struct

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Per architecture: sizes, the special tokens its chat template writes, bos and eos.
MODELS = {
    "gpt2": {"specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
             "bos": "<|endoftext|>", "eos": "<|im_end|>"},
    "llama": {"specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                           "<|end_header_id|>", "<|eot_id|>"],
              "bos": "<|begin_of_text|>", "eos": "<|eot_id|>"},
    "mixtral": {"specials": ["<unk>", "<s>", "</s>"], "bos": "<s>", "eos": "</s>"},
}
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"),
          ("Ġ", "s"), ("r", "e"), ("a", "t")]
C, LAYERS, CONTEXT = 32, 2, 512


def byte_to_unicode():
    """GPT-2's table: every byte a printable character."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def tokenizer_json(arch):
    table = byte_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    for left, right in MERGES:
        vocab[left + right] = len(vocab)
    added = []
    for text in MODELS[arch]["specials"]:
        added.append({"id": len(vocab) + len(added), "content": text, "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": arch != "llama"}
    pre = byte_level if arch != "llama" else {
        "type": "Sequence",
        "pretokenizers": [{"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN},
                           "behavior": "Isolated", "invert": False}, byte_level]}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": pre, "post_processor": byte_level,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": arch == "llama",
                      "vocab": vocab, "merges": [[a, b] for a, b in MERGES]}}


def config_json(arch, vocab_size):
    if arch == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                "vocab_size": vocab_size, "n_embd": C, "n_layer": LAYERS, "n_head": 2,
                "n_positions": CONTEXT, "n_ctx": CONTEXT, "n_inner": None,
                "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
                "initializer_range": 0.02, "scale_attn_weights": True, "use_cache": True,
                "bos_token_id": vocab_size - 3, "eos_token_id": vocab_size - 3,
                "torch_dtype": "float32", "transformers_version": "4.46.0"}
    common = {"vocab_size": vocab_size, "hidden_size": C, "intermediate_size": 64,
              "num_hidden_layers": LAYERS, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "hidden_act": "silu", "initializer_range": 0.02, "attention_dropout": 0.0,
              "tie_word_embeddings": False, "use_cache": True, "torch_dtype": "float32",
              "transformers_version": "4.46.0"}
    if arch == "llama":
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "attention_bias": False, "mlp_bias": False, "rope_scaling": None,
                "pretraining_tp": 1, **common}
    return {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
            "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
            "output_router_logits": False, "sliding_window": None, **common}


def tensor_shapes(arch, vocab_size):
    """Transformers' state_dict names and shapes, in its order."""
    if arch == "gpt2":
        shapes = [("transformer.wte.weight", [vocab_size, C]),
                  ("transformer.wpe.weight", [CONTEXT, C])]
        for l in range(LAYERS):
            h = f"transformer.h.{l}."
            shapes += [(h + "ln_1.weight", [C]), (h + "ln_1.bias", [C]),
                       (h + "attn.c_attn.weight", [C, 3 * C]), (h + "attn.c_attn.bias", [3 * C]),
                       (h + "attn.c_proj.weight", [C, C]), (h + "attn.c_proj.bias", [C]),
                       (h + "ln_2.weight", [C]), (h + "ln_2.bias", [C]),
                       (h + "mlp.c_fc.weight", [C, 4 * C]), (h + "mlp.c_fc.bias", [4 * C]),
                       (h + "mlp.c_proj.weight", [4 * C, C]), (h + "mlp.c_proj.bias", [C])]
        return shapes + [("transformer.ln_f.weight", [C]), ("transformer.ln_f.bias", [C])]
    head_dim, kv, F = C // 4, 2, 64
    shapes = [("model.embed_tokens.weight", [vocab_size, C])]
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        shapes += [(p + "input_layernorm.weight", [C]),
                   (p + "self_attn.q_proj.weight", [4 * head_dim, C]),
                   (p + "self_attn.k_proj.weight", [kv * head_dim, C]),
                   (p + "self_attn.v_proj.weight", [kv * head_dim, C]),
                   (p + "self_attn.o_proj.weight", [C, 4 * head_dim]),
                   (p + "post_attention_layernorm.weight", [C])]
        if arch == "llama":
            shapes += [(p + "mlp.gate_proj.weight", [F, C]), (p + "mlp.up_proj.weight", [F, C]),
                       (p + "mlp.down_proj.weight", [C, F])]
        else:
            shapes.append((p + "block_sparse_moe.gate.weight", [4, C]))
            for e in range(4):
                x = f"{p}block_sparse_moe.experts.{e}."
                shapes += [(x + "w1.weight", [F, C]), (x + "w2.weight", [C, F]),
                           (x + "w3.weight", [F, C])]
    return shapes + [("model.norm.weight", [C]), ("lm_head.weight", [vocab_size, C])]


def values(name, shape, rng):
    n = 1
    for d in shape:
        n *= d
    if name.endswith("norm.weight") or name.endswith("ln_1.weight") or \
            name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
        return [1.0 + rng.gauss(0, 0.1) for _ in range(n)]
    return [rng.gauss(0, 0.3) for _ in range(n)]


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, shape, data in tensors:
        blob = struct.pack(f"<{len(data)}f", *data)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", choices=sorted(MODELS), required=True)
    parser.add_argument("--template", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    model = MODELS[args.arch]

    tokenizer = tokenizer_json(args.arch)
    vocab_size = len(tokenizer["model"]["vocab"]) + len(tokenizer["added_tokens"])
    ids = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    with open(args.template, encoding="utf-8") as f:
        template = f.read()

    def dump(name, obj):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)

    dump("tokenizer.json", tokenizer)
    dump("tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": CONTEXT,
        "bos_token": model["bos"], "eos_token": model["eos"], "chat_template": template,
        "clean_up_tokenization_spaces": False})
    dump("generation_config.json", {"_from_model_config": False, "bos_token_id": ids[model["bos"]],
                                    "eos_token_id": [ids[model["eos"]]]})
    dump("config.json", config_json(args.arch, vocab_size))

    rng = random.Random(args.seed)
    tensors = [(name, shape, values(name, shape, rng))
               for name, shape in tensor_shapes(args.arch, vocab_size)]
    if args.arch != "mixtral":
        write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
        return
    half = len(tensors) // 2
    shards = {"model-00001-of-00002.safetensors": tensors[:half],
              "model-00002-of-00002.safetensors": tensors[half:]}
    weight_map = {}
    for file, part in shards.items():
        write_safetensors(os.path.join(args.out, file), part)
        weight_map.update({name: file for name, _, _ in part})
    dump("model.safetensors.index.json", {"metadata": {"total_size": 4 * sum(
        len(d) for _, _, d in tensors)}, "weight_map": weight_map})


if __name__ == "__main__":
    main()
