"""Strata's own GPT in PyTorch, for a Python worker in a job with C++
workers (`strata worker`): the same parameters under the same names and
shapes (model/gpt.cc's GptParams), the same math (GPT-2's: pre-LayerNorm
blocks, tanh GELU, a causal softmax attention scaled by 1/sqrt(head size),
the head tied to the token embedding), and the model the C++ worker
registers with the servers (trainer/server_model.cc: AdamW with betas 0.9
and 0.95, decay on matrices only, its learning-rate schedule, weights
drawn on the servers). Together with strata.TokenDataset (the C++
worker's windows of the same --data) and an ElasticSampler of the same
job, a Python worker computes its share of each step as a C++ worker
would:

    model = strata.gpt.Gpt(layers=2, heads=2, width=64, context=64)
    tensors, groups = strata.gpt.server_model(model.config, lr=1e-3,
                                              steps=100, seed=1)
    opt = strata.torch.DistributedOptimizer(model.named_parameters(),
                                            spec=(tensors, groups), ...)
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from strata import model as model_spec


class _Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class _Mlp(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class _Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(width, eps=1e-5)
        self.attn = _Attention(width, heads)
        self.ln2 = nn.LayerNorm(width, eps=1e-5)
        self.mlp = _Mlp(width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    """named_parameters() yields GptParams' names in its order: wte, wpe,
    h.<l>.{ln1,attn.qkv,attn.proj,ln2,mlp.fc,mlp.proj}.{weight,bias},
    lnf.{weight,bias}. forward(tokens, targets) is the mean cross-entropy
    over every position, as the C++ worker's loss."""

    def __init__(self, layers, heads, width, context, vocab=256):
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads "
                             f"{heads}")
        self.config = dict(layers=layers, heads=heads, width=width,
                           context=context, vocab=vocab)
        self.wte = nn.Parameter(torch.zeros(vocab, width))
        self.wpe = nn.Parameter(torch.zeros(context, width))
        self.h = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(width, eps=1e-5)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte[tokens] + self.wpe[:T]
        for block in self.h:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               targets.reshape(-1))


def _draw(name, layers):
    """How the servers draw parameter `name` (model/gpt.cc's GptParams):
    (init kind, scale, weight-decay group)."""
    if name in ("wte", "wpe"):
        return "normal", 0.02, "decay" if name == "wte" else "no_decay"
    if name.endswith("bias"):
        return "zeros", 0.0, "no_decay"
    if ".ln" in name or name.startswith("lnf"):
        return "ones", 0.0, "no_decay"
    # In float32, as GptParams computes it: the servers compare inits
    # exactly.
    std = np.float32(0.02)
    scale = std / np.sqrt(np.float32(2 * layers)) \
        if name.endswith("proj.weight") else std
    return "normal", float(scale), "decay"


def server_model(config, lr=1e-3, weight_decay=0.1, warmup_steps=10,
                 steps=100, min_lr_ratio=0.1, seed=1):
    """The tensors and groups `strata worker` registers for a GPT of
    `config` (Gpt.config) with these trainer flags (--lr, --weight_decay,
    --warmup_steps, --steps, --min_lr_ratio, --seed): pass them to
    DistributedOptimizer(spec=...). A job's workers must register the same
    model; the servers refuse another."""
    tensors = []
    for name, p in Gpt(**config).named_parameters():
        kind, scale, group = _draw(name, config["layers"])
        tensors.append(model_spec.tensor(
            name, list(p.shape), group,
            {"kind": kind, "scale": scale, "seed": seed}))
    groups = [model_spec.group(g, optimizer="adamw", lr=lr,
                               betas=(0.9, 0.95), eps=1e-8,
                               weight_decay=weight_decay if g == "decay"
                               else 0.0,
                               warmup_steps=warmup_steps, total_steps=steps,
                               min_lr_ratio=min_lr_ratio)
              for g in ("decay", "no_decay")]
    return tensors, groups
