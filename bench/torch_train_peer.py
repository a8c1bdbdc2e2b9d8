#!/usr/bin/python3
"""The PyTorch peer of bench/train_step_bench: the same model trained the same way on the CPU.

GPT-2 (tied embedding, learned positions, pre-LayerNorm blocks, tanh GELU, biases) or Llama
(RMSNorm, SwiGLU, rotary embeddings in the rotate-half layout, grouped-query attention, no biases,
untied head), on random token ids drawn once from a seeded generator, a full step each time:
forward, cross-entropy, backward, AdamW (lr 3e-4, betas 0.9/0.999, no weight decay, as
train_step_bench), gradients set to None between steps. f32, or bf16 under torch.autocast (whose
matmuls go to oneDNN, on AMX where the CPU has it). Attention is the explicit masked softmax:
Debian's PyTorch 1.13 has no fused attention on the CPU. With --documents L every L-th token is
the separator 0 and the mask is block-diagonal causal: a document does not see the ones before.

With --lora-rank R the model is frozen and LoRA adapters of rank R (alpha 2R) on the attention and
MLP linears are trained instead, as PEFT does: one A [R, in] and B [out, R] per Hugging Face
module (Llama's q, k and v, gate and up, each apart; GPT-2's fused c_attn and c_fc one each);
--lora-dropout P drops their inputs with probability P, one mask per wrapped linear.
--lora-quantize q8_0 holds each block's frozen matrices in q8_0 (blocks of 32 int8 values with an
f16 scale, as ggml quantises them) and widens them to f32 in every forward and backward that
reads them, as QLoRA does with its 4-bit blocks (bitsandbytes is not a Debian package).

Run it through bench/torch_env.sh, which checks that the peer can run at its best and sets the
environment it is fastest in. Prints one 'RESULT {...}' JSON line: tokens/s over the timed steps
(the mean, and the fastest step), the losses, and the torch version and BLAS it ran with.

  bench/torch_env.sh bench/torch_train_peer.py --arch gpt2 --n-layer 12 --n-head 12 \
      --d-model 768 --vocab 50257 --batch 4 --seq 64 --precision bf16 --warmup 2 --steps 5
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RmsNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads, self.kv_heads, self.hd = a.n_head, a.kv_heads, a.d_model // a.n_head
        bias = a.arch == "gpt2"
        self.qkv = nn.Linear(a.d_model, (a.n_head + 2 * a.kv_heads) * self.hd, bias=bias)
        self.proj = nn.Linear(a.n_head * self.hd, a.d_model, bias=bias)

    def forward(self, x, mask, rope):
        B, T, _ = x.shape
        H, KVH, hd = self.heads, self.kv_heads, self.hd
        q, k, v = self.qkv(x).split([H * hd, KVH * hd, KVH * hd], dim=2)
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, KVH, hd).transpose(1, 2)
        v = v.view(B, T, KVH, hd).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if KVH != H:
            k = k.repeat_interleave(H // KVH, dim=1)
            v = v.repeat_interleave(H // KVH, dim=1)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        probabilities = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (probabilities @ v).transpose(1, 2).reshape(B, T, H * hd)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.gpt2 = a.arch == "gpt2"
        width = a.ffn if self.gpt2 else 2 * a.ffn
        self.up = nn.Linear(a.d_model, width, bias=self.gpt2)
        self.down = nn.Linear(a.ffn, a.d_model, bias=self.gpt2)

    def forward(self, x):
        h = self.up(x)
        if self.gpt2:
            return self.down(F.gelu(h, approximate="tanh"))
        gate, up = h.chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Q8_0Linear(nn.Module):
    """A frozen linear whose weight is held in q8_0 and widened to f32 in each use."""

    def __init__(self, base):
        super().__init__()
        w = base.weight.detach().reshape(-1, 32)
        scale = (w.abs().amax(1, keepdim=True) / 127).to(torch.float16)
        inverse = torch.where(scale > 0, 1 / (w.abs().amax(1, keepdim=True) / 127),
                              torch.zeros_like(w[:, :1]))
        self.register_buffer("q", torch.round(w * inverse).to(torch.int8))
        self.register_buffer("scale", scale)
        self.bias = base.bias
        self.in_features, self.out_features = base.in_features, base.out_features

    def forward(self, x):
        w = (self.q.float() * self.scale.float()).reshape(self.out_features, self.in_features)
        return F.linear(x, w, self.bias)


class Lora(nn.Module):
    """A frozen linear plus alpha / r (x A_j^T) B_j^T on each piece j of its output."""

    def __init__(self, base, pieces, r, dropout):
        super().__init__()
        self.base, self.r, self.scale = base, r, 2.0
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.a = nn.Parameter(torch.empty(r * len(pieces), base.in_features))
        nn.init.kaiming_uniform_(self.a, a=math.sqrt(5))
        self.b = nn.ParameterList(nn.Parameter(torch.zeros(w, r)) for w in pieces)

    def forward(self, x):
        u = self.dropout(x) @ self.a.t()
        r = self.r
        delta = torch.cat([u[..., j * r:(j + 1) * r] @ b.t() for j, b in enumerate(self.b)], -1)
        return self.base(x) + self.scale * delta


def add_lora(model, a):
    for p in model.parameters():
        p.requires_grad_(False)
    if a.lora_quantize == "q8_0":
        for block in model.blocks:
            for owner, name in ((block.attention, "qkv"), (block.attention, "proj"),
                                (block.mlp, "up"), (block.mlp, "down")):
                setattr(owner, name, Q8_0Linear(getattr(owner, name)))
    llama = a.arch == "llama"
    hd = a.d_model // a.n_head
    for block in model.blocks:
        qkv = ([a.n_head * hd, a.kv_heads * hd, a.kv_heads * hd] if llama
               else [block.attention.qkv.out_features])
        block.attention.qkv = Lora(block.attention.qkv, qkv, a.lora_rank, a.lora_dropout)
        block.attention.proj = Lora(block.attention.proj, [a.d_model], a.lora_rank, a.lora_dropout)
        up = [a.ffn, a.ffn] if llama else [a.ffn]
        block.mlp.up = Lora(block.mlp.up, up, a.lora_rank, a.lora_dropout)
        block.mlp.down = Lora(block.mlp.down, [a.d_model], a.lora_rank, a.lora_dropout)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        norm = (lambda: nn.LayerNorm(a.d_model)) if a.arch == "gpt2" else (
            lambda: RmsNorm(a.d_model, 1e-5))
        self.norm1, self.attention, self.norm2, self.mlp = norm(), Attention(a), norm(), Mlp(a)

    def forward(self, x, mask, rope):
        x = x + self.attention(self.norm1(x), mask, rope)
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.gpt2 = a.arch == "gpt2"
        self.wte = nn.Embedding(a.vocab, a.d_model)
        self.wpe = nn.Embedding(a.seq, a.d_model) if self.gpt2 else None
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.n_layer))
        self.norm = nn.LayerNorm(a.d_model) if self.gpt2 else RmsNorm(a.d_model, 1e-5)
        self.head = nn.Linear(a.d_model, a.vocab, bias=False)
        if self.gpt2:
            self.head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
        mask = torch.ones(a.seq, a.seq, dtype=torch.bool).triu(1)
        if a.documents:
            document = torch.arange(a.seq) // a.documents
            mask |= document[:, None] != document[None, :]
        self.register_buffer("mask", mask, persistent=False)
        self.rope = None
        if not self.gpt2:
            hd = a.d_model // a.n_head
            inverse = 1.0 / (1e4 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            angles = torch.outer(torch.arange(a.seq, dtype=torch.float32), inverse)
            angles = torch.cat((angles, angles), dim=-1)
            self.rope = (angles.cos(), angles.sin())

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens)
        if self.gpt2:
            x = x + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x, self.mask[:T, :T], self.rope)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"])
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=0, help="0: --n-head")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=0, help="0: 4 d (GPT-2), 8/3 d rounded to 256")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--documents", type=int, default=0,
                    help="tokens per packed document, its last the separator 0; 0: one per row")
    ap.add_argument("--lora-rank", type=int, default=0,
                    help="train LoRA adapters of this rank on a frozen model; 0: every weight")
    ap.add_argument("--lora-dropout", type=float, default=0.0,
                    help="dropout on the LoRA adapters' inputs")
    ap.add_argument("--lora-quantize", default="none", choices=["none", "q8_0"],
                    help="how the frozen block matrices are held")
    a = ap.parse_args()
    a.kv_heads = a.kv_heads or a.n_head
    if not a.ffn:
        a.ffn = 4 * a.d_model if a.arch == "gpt2" else (8 * a.d_model // 3 + 255) // 256 * 256
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    model = Model(a)
    if a.lora_rank:
        add_lora(model, a)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=3e-4, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.0)
    pool = torch.randint(1, a.vocab, (64, a.seq + 1), generator=torch.Generator().manual_seed(42))
    if a.documents:
        pool[:, a.documents - 1::a.documents] = 0
    B, T = a.batch, a.seq
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        rows = torch.arange(step * B, step * B + B) % pool.shape[0]
        x, y = pool[rows, :T], pool[rows, 1:]
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - t0
        losses.append(loss.item())
        if step >= a.warmup:
            times.append(elapsed)
    blas = [line.strip() for line in torch.__config__.show().splitlines() if "BLAS" in line]
    print("RESULT " + json.dumps({
        "arch": a.arch, "precision": a.precision, "B": B, "T": T, "n_layer": a.n_layer,
        "d_model": a.d_model, "vocab": a.vocab, "threads": torch.get_num_threads(),
        "params": sum(p.numel() for p in model.parameters()),
        "trained_params": sum(p.numel() for p in trained),
        # f32 parameters (q8_0 blocks as they are held), and a gradient and AdamW's two
        # moments for each trained one
        "model_state_bytes": 4 * sum(p.numel() for p in model.parameters())
        + sum(b.numel() * b.element_size() for b in model.buffers())
        + 12 * sum(p.numel() for p in trained),
        "tokens_per_s": B * T * len(times) / sum(times), "tokens_per_s_best": B * T / min(times),
        "step_ms": [1e3 * t for t in times], "first_loss": losses[0], "last_loss": losses[-1],
        "torch": torch.__version__, "blas": blas}))


if __name__ == "__main__":
    main()
