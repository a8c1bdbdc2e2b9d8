#!/usr/bin/python3
"""Logits of a Hugging Face model folder, computed the way Transformers computes them.

Reads DIR/config.json and DIR/model.safetensors, parsing the safetensors file by hand (8-byte
little-endian header length, JSON header, raw little-endian data) so that nothing of Tessera's
reader is reused, and runs the forward pass of the architecture config.json names, following
Transformers' modelling code:

  gpt2     GPT2LMHeadModel: Conv1D layers (weights stored [in, out], y = x W + b), learned
           positions, pre-LayerNorm, gelu_new, tied lm_head.
  llama    LlamaForCausalLM: RMSNorm (x * rsqrt(mean(x^2) + eps) * w), rotary embeddings in the
           rotate_half layout, grouped-query attention (query head h reads key/value head
           h // (H / KVH)), SwiGLU MLP down(silu(gate(x)) * up(x)), lm_head or tied embedding.
  mixtral  MixtralForCausalLM: Llama attention, and a sparse MoE block: softmax over the router
           logits, the top num_experts_per_tok experts, their weights renormalised to sum to 1,
           each expert w2(silu(w1 x) * w3 x).

Everything runs in float64 so that the result is a reference for Tessera's float32 forward.
Prints {"logits": [[...vocab...] per token]} as JSON on stdout.

Run it with Debian's python3-torch (the pyenv python3 on PATH has no torch):

  /usr/bin/python3 tests/reference/hf_forward.py --hf DIR --tokens 1,2,3
"""

import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
}


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    data = raw[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        if end > begin:
            flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype)
        else:
            flat = torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"]).to(torch.float64)
    return tensors


def causal_attention(q, k, v):
    """q [H, T, D], k and v [H, T, D] (already repeated for GQA) -> [T, H * D]."""
    H, T, D = q.shape
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    scores = scores.masked_fill(~mask, float("-inf"))
    y = F.softmax(scores, dim=-1) @ v
    return y.transpose(0, 1).reshape(T, H * D)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def gpt2_logits(cfg, w, ids):
    p = "transformer." if "transformer.wte.weight" in w else ""
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    T = len(ids)

    def ln(x, name):
        return F.layer_norm(x, (C,), w[name + ".weight"], w[name + ".bias"], eps)

    def conv1d(x, name):
        return x @ w[name + ".weight"] + w[name + ".bias"]

    x = w[p + "wte.weight"][ids] + w[p + "wpe.weight"][:T]
    for i in range(L):
        h = f"{p}h.{i}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=-1)
        heads = lambda t: t.view(T, H, C // H).transpose(0, 1)
        x = x + conv1d(causal_attention(heads(q), heads(k), heads(v)), h + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")), h + "mlp.c_proj")
    x = ln(x, p + "ln_f")
    head = w.get("lm_head.weight", w[p + "wte.weight"])
    return x @ head.T


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama_logits(cfg, w, ids, mixtral):
    C, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    H = cfg["num_attention_heads"]
    KVH = cfg.get("num_key_value_heads", H)
    D = C // H
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    T = len(ids)

    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [T, D], broadcast over heads

    def rope(t):  # [heads, T, D]
        return t * cos + rotate_half(t) * sin

    def linear(x, name):
        return x @ w[name + ".weight"].T

    def swiglu(x, gate, up, down):
        return linear(F.silu(linear(x, gate)) * linear(x, up), down)

    x = w["model.embed_tokens.weight"][ids]
    for i in range(L):
        h = f"model.layers.{i}."
        a = rms_norm(x, w[h + "input_layernorm.weight"], eps)
        q = linear(a, h + "self_attn.q_proj").view(T, H, D).transpose(0, 1)
        k = linear(a, h + "self_attn.k_proj").view(T, KVH, D).transpose(0, 1)
        v = linear(a, h + "self_attn.v_proj").view(T, KVH, D).transpose(0, 1)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // KVH, dim=0)
        v = v.repeat_interleave(H // KVH, dim=0)
        x = x + linear(causal_attention(q, k, v), h + "self_attn.o_proj")
        m = rms_norm(x, w[h + "post_attention_layernorm.weight"], eps)
        if not mixtral:
            x = x + swiglu(m, h + "mlp.gate_proj", h + "mlp.up_proj", h + "mlp.down_proj")
            continue
        moe = h + "block_sparse_moe."
        probs = F.softmax(linear(m, moe + "gate"), dim=-1)
        top_w, top_e = torch.topk(probs, cfg.get("num_experts_per_tok", 2), dim=-1)
        top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(m)
        for t in range(T):
            for weight, e in zip(top_w[t], top_e[t]):
                x_e = f"{moe}experts.{int(e)}."
                out[t] += weight * swiglu(m[t], x_e + "w1", x_e + "w3", x_e + "w2")
        x = x + out
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hf", required=True, help="folder with config.json and model.safetensors")
    parser.add_argument("--tokens", required=True, help="comma-separated token ids")
    args = parser.parse_args()
    with open(os.path.join(args.hf, "config.json")) as f:
        cfg = json.load(f)
    weights = load_safetensors(os.path.join(args.hf, "model.safetensors"))
    ids = torch.tensor([int(t) for t in args.tokens.split(",")], dtype=torch.long)
    model_type = cfg["model_type"]
    with torch.no_grad():
        if model_type == "gpt2":
            logits = gpt2_logits(cfg, weights, ids)
        elif model_type in ("llama", "mixtral"):
            logits = llama_logits(cfg, weights, ids, model_type == "mixtral")
        else:
            sys.exit(f"hf_forward.py: model_type {model_type!r} is not one of gpt2, llama, mixtral")
    json.dump({"logits": logits.tolist()}, sys.stdout)


if __name__ == "__main__":
    main()
