"""A small GPT in plain PyTorch (nanoGPT's shape, a few hundred
parameters per layer) and a synthetic dataset, shared by the tests, the
worker script and the reference run. With experts, each block's MLP is
a top-1 mixture of experts (Switch: the gate is the chosen expert's
probability; every token kept), an expert no token reached left out of
the graph, so its parameters get no gradient (.grad None)."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS = 32, 8, 16, 2, 2
SAMPLES = 256


class Experts(nn.Module):
    def __init__(self, experts):
        super().__init__()
        self.router = nn.Linear(WIDTH, experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(),
                          nn.Linear(2 * WIDTH, WIDTH))
            for _ in range(experts))

    def forward(self, x):
        flat = x.reshape(-1, WIDTH)
        probs = self.router(flat).softmax(-1)
        gate, choice = probs.max(-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows = (choice == e).nonzero().squeeze(1)
            if rows.numel() > 0:
                out = out.index_add(
                    0, rows, gate[rows, None] * expert(flat[rows]))
        return out.view_as(x)


class Block(nn.Module):
    def __init__(self, experts=0):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        # No bias: the key bias's gradient is zero up to rounding (softmax
        # ignores a constant per query), and Adam turns that rounding noise
        # into full-size steps that no two summation orders share.
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.ln2 = nn.LayerNorm(WIDTH)
        if experts:
            self.moe = Experts(experts)
        else:
            self.fc = nn.Linear(WIDTH, 4 * WIDTH)
            self.out = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2)
                   for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (C // HEADS) ** 0.5
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        if hasattr(self, "moe"):
            return x + self.moe(self.ln2(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGpt(nn.Module):
    def __init__(self, experts=0):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block(experts) for _ in range(LAYERS))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def model(seed=0, experts=0):
    torch.manual_seed(seed)
    return TinyGpt(experts)


def dataset(seed=7):
    """SAMPLES windows of CONTEXT + 1 tokens of a noisy counting sequence
    (learnable: the loss falls)."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, VOCAB, size=(SAMPLES, 1))
    steps = np.arange(CONTEXT + 1)[None, :]
    noise = (rng.random((SAMPLES, CONTEXT + 1)) < 0.1) * rng.integers(
        0, VOCAB, size=(SAMPLES, CONTEXT + 1))
    return torch.from_numpy((start + steps + noise) % VOCAB).long()


def batch(data, indices):
    rows = data[list(indices)]
    return rows[:, :-1], rows[:, 1:]
