#!/usr/bin/env python3
"""The PyTorch peer of train_step_bench --device cuda: a GPT-2 of the same shape (tied embedding,
learned positions, pre-norm blocks, tanh GELU) trained on random tokens on a CUDA device, at its
best: bf16 autocast (or f32), PyTorch's fused causal attention, fused AdamW, optionally
torch.compile. Prints one 'RESULT {...}' JSON line with tokens/s and, given the FLOPs per token
that Tessera counts for the same shape and the device's peak, the MFU on the same terms.

  python3 bench/torch_gpu_train_peer.py --n-layer 12 --n-head 12 --d-model 768 --batch 16 \
      --seq 1024 --precision bf16 [--compile] [--flops-per-token F --peak-flops 989e12]
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        shape = (B, T, self.heads, C // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, vocab, seq, layers, heads, d):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("n-layer", 12), ("n-head", 12), ("d-model", 768), ("vocab", 50257),
                          ("batch", 16), ("seq", 1024), ("warmup", 3), ("steps", 10)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--precision", choices=["f32", "bf16"], default="bf16")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--peak-flops", type=float, default=0.0)
    p.add_argument("--flops-per-token", type=float, default=0.0)
    a = p.parse_args()
    assert torch.cuda.is_available(), "no CUDA device for PyTorch"
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = Gpt2(a.vocab, a.seq, a.n_layer, a.n_head, a.d_model).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999),
                                  weight_decay=0.0, fused=True)
    step_fn = torch.compile(model) if a.compile else model
    tokens = torch.randint(0, a.vocab, (64, a.seq + 1), device=dev)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    seconds = 0.0
    loss = None
    for step in range(a.warmup + a.steps):
        rows = torch.arange(step * a.batch, (step + 1) * a.batch, device=dev) % 64
        x, y = tokens[rows, :-1], tokens[rows, 1:]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=dtype, enabled=a.precision == "bf16"):
            loss = step_fn(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= a.warmup:
            seconds += time.perf_counter() - t0
    mean = seconds / a.steps
    result = {"B": a.batch, "T": a.seq, "precision": a.precision, "compile": a.compile,
              "device_name": torch.cuda.get_device_name(), "torch": torch.__version__,
              "step_ms_mean": 1e3 * mean, "tokens_per_s": a.batch * a.seq / mean,
              "last_loss": float(loss)}
    if a.peak_flops > 0 and a.flops_per_token > 0:
        result["mfu"] = result["tokens_per_s"] * a.flops_per_token / a.peak_flops
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
