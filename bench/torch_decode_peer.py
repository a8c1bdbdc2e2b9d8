#!/usr/bin/python3
"""Batch-1 GPT-2 decoding with a key/value cache in PyTorch: the peer of bench/decode_bench.

Own code. The model is GPT-2 small's shape by default (12 layers, 12 heads, d_model 768, vocab
50257, 1024 positions, tied head) with random weights. Like decode_bench, a --prompt-token
prompt is prefilled, then --steps single-token steps each feed back the greedy token; only the
steps are timed. Keys and values live in preallocated [layers, heads, positions, head_dim] tensors,
written in place. f32 runs the model in float32; bf16 converts every parameter to bfloat16, as
bf16 inference in PyTorch is usually done. Under torch.inference_mode, --threads threads.

For benchmarks only, never tests or CI: run through bench/decode.sh, which sets the environment
that makes Debian's python3-torch fastest on this CPU (bench/torch_env.sh).
Prints one 'RESULT {...}' JSON line with each dtype's best and median tokens/s.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__()
        s.h, s.hd = h, d // h
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.fc, s.fcproj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(s, x, k_cache, v_cache, pos):
        """x: [T, d] for positions pos..pos+T-1; k_cache, v_cache: [h, max_seq, hd]."""
        T, d = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(d, dim=1)
        q, k, v = (t.view(T, s.h, s.hd).transpose(0, 1) for t in (q, k, v))
        k_cache[:, pos:pos + T] = k
        v_cache[:, pos:pos + T] = v
        keys, values = k_cache[:, :pos + T], v_cache[:, :pos + T]
        att = (q @ keys.transpose(1, 2)) * (1.0 / math.sqrt(s.hd))
        if T > 1:  # causal within the new tokens; all cached positions are visible
            mask = torch.ones(T, pos + T, dtype=torch.bool).tril(diagonal=pos)
            att = att.masked_fill(~mask, float("-inf"))
        y = (att.softmax(dim=-1) @ values).transpose(0, 1).reshape(T, d)
        x = x + s.proj(y)
        return x + s.fcproj(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, n_layer, n_head, d_model, vocab, max_seq):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(vocab, d_model), nn.Embedding(max_seq, d_model)
        s.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        s.lnf = nn.LayerNorm(d_model)
        for n, p in s.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if n.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(s, tokens, k_cache, v_cache, pos):
        """Next-token logits after tokens [T] at positions pos..pos+T-1."""
        x = s.wte(tokens) + s.wpe(torch.arange(pos, pos + len(tokens)))
        for l, block in enumerate(s.blocks):
            x = block(x, k_cache[l], v_cache[l], pos)
        return F.linear(s.lnf(x[-1]), s.wte.weight)  # the tied head, last position only


def decode(model, cache_shape, dtype, prompt, steps):
    """Prefills the prompt, then decodes `steps` tokens one at a time; returns their tokens/s."""
    k_cache = torch.zeros(cache_shape, dtype=dtype)
    v_cache = torch.zeros(cache_shape, dtype=dtype)
    logits = model(prompt, k_cache, v_cache, 0)
    pos = len(prompt)
    t0 = time.perf_counter()
    for _ in range(steps):
        token = logits.argmax().view(1)
        logits = model(token, k_cache, v_cache, pos)
        pos += 1
    return steps / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--max-seq", type=int, default=1024)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default="f32,bf16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    prompt = torch.tensor([(1000 * i + 13) % a.vocab for i in range(a.prompt)])
    cache_shape = (a.n_layer, a.n_head, a.prompt + a.steps, a.d_model // a.n_head)
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    models = {}
    for name in a.dtypes.split(","):
        models[name] = GPT(a.n_layer, a.n_head, a.d_model, a.vocab, a.max_seq).to(dtypes[name]).eval()
    result = {"threads": a.threads, "prompt": a.prompt, "steps": a.steps, "repeats": a.repeats,
              "torch": torch.__version__, "formats": {}}
    with torch.inference_mode():
        runs = {name: [] for name in models}
        for name, model in models.items():  # warm-up
            decode(model, cache_shape, dtypes[name], prompt, a.steps)
        for _ in range(a.repeats):  # alternating, as decode_bench does
            for name, model in models.items():
                runs[name].append(decode(model, cache_shape, dtypes[name], prompt, a.steps))
    for name, tps in runs.items():
        result["formats"][name] = {"tokens_per_s": max(tps),
                                   "tokens_per_s_median": statistics.median(tps)}
        print(f"torch {name:5s} {max(tps):8.1f} tok/s (median {statistics.median(tps):.1f})")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
