"""The benchmarked language model: a CS336-style GPT (pre-norm RMSNorm blocks, causal multi-head
attention with RoPE, SwiGLU feed-forward, untied embedding and output head).

The attention call is a function the caller sets (`GPT.attend`), so one model with one set of
weights runs every attention implementation. It takes q, k, v as (batch, seq, heads, head_dim)
tensors, the layout the fused QKV projection produces without a copy, and returns the output in
the same layout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 10_000
BATCH = 4
ROPE_THETA = 10_000.0


@dataclass(frozen=True)
class ModelSize:
    name: str
    d_model: int
    d_ff: int
    layers: int
    heads: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


MODELS = {m.name: m for m in (
    ModelSize("S", 768, 3072, 12, 12),
    ModelSize("M", 1024, 4096, 24, 16),
    ModelSize("L", 1280, 5120, 36, 20),
    ModelSize("XL", 1600, 6400, 48, 25),
    ModelSize("2.7B", 2560, 10240, 32, 32),
    ModelSize("tiny", 64, 256, 2, 4),  # CPU smoke runs only
)}


def _trunc_normal(t: torch.Tensor, std: float) -> torch.Tensor:
    return nn.init.trunc_normal_(t, std=std, a=-3 * std, b=3 * std)


class Linear(nn.Module):
    """y = x Wᵀ, no bias, weights ~ truncated N(0, 2 / (d_in + d_out)) as in CS336."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(_trunc_normal(torch.empty(d_out, d_in), math.sqrt(2 / (d_in + d_out))))

    def forward(self, x):
        return F.linear(x, self.weight)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight).to(x.dtype)


class RoPE(nn.Module):
    """Rotary position embedding on (batch, seq, heads, head_dim), rotating the two halves of the
    head dim; the result keeps x's dtype (under autocast: the projection's bf16)."""

    def __init__(self, head_dim: int, max_seq: int, theta: float = ROPE_THETA):
        super().__init__()
        inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.arange(max_seq, dtype=torch.float32)[:, None] * inv[None, :]
        self.register_buffer("cos", angles.cos()[:, None, :], persistent=False)  # (n, 1, d/2)
        self.register_buffer("sin", angles.sin()[:, None, :], persistent=False)

    def forward(self, x):
        n, half = x.shape[1], x.shape[-1] // 2
        cos, sin = self.cos[:n].to(x.dtype), self.sin[:n].to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Block(nn.Module):
    def __init__(self, size: ModelSize, rope: RoPE):
        super().__init__()
        d = size.d_model
        self.heads, self.head_dim = size.heads, size.head_dim
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.qkv, self.proj = Linear(d, 3 * d), Linear(d, d)
        self.w1, self.w3, self.w2 = Linear(d, size.d_ff), Linear(d, size.d_ff), Linear(size.d_ff, d)
        self.rope = rope

    def forward(self, x, attend):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, self.head_dim).unbind(2)
        o = attend(self.rope(q), self.rope(k), v)  # (b, n, h, hd) in, (b, n, h, hd) out
        x = x + self.proj(o.reshape(b, n, d))
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class GPT(nn.Module):
    def __init__(self, size: ModelSize, max_seq: int, vocab: int = VOCAB):
        super().__init__()
        self.size = size
        self.embed = nn.Embedding(vocab, size.d_model)
        _trunc_normal(self.embed.weight.data, 1.0)
        rope = RoPE(size.head_dim, max_seq)
        self.blocks = nn.ModuleList(Block(size, rope) for _ in range(size.layers))
        self.norm = RMSNorm(size.d_model)
        self.head = Linear(size.d_model, vocab)
        self.attend = None  # set by the benchmark: (q, k, v) -> o, all (b, n, h, hd)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, self.attend)
        return self.head(self.norm(x))


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
