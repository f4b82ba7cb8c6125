#!/usr/bin/env python3
"""PyTorch reference for bench/cpu_train.sh: the same GPT shapes, trained on
random tokens with AdamW on the CPU (fp32). Prints, per configuration,
`torch_tokens_per_s <config> <tokens/s>` from the median step time after one
warm-up step, like bench/cpu_train_bench.cc."""

import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    # name, layers, heads, width, context, batch
    ("L4_C256_H4_B8_T256", 4, 4, 256, 256, 8),
    ("L12_C768_H12_B4_T64", 12, 12, 768, 64, 4),
]
VOCAB = 50257


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # Debian 12's torch 1.13: the masked softmax, written out
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)),
                                       approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, heads, width, context):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(width)
        self.init_gpt2(layers)

    def init_gpt2(self, layers):
        """GPT-2's initialization, as Strata's Gpt::InitParams: weights and
        embeddings normal with std 0.02, the residual projections 0.02 /
        sqrt(2 * layers), biases 0, LayerNorm scales 1 (so the first loss
        is near ln(vocab) = 10.8, not PyTorch's default embedding init's
        hundreds)."""
        std = 0.02
        proj_std = std / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("lnf"):
                nn.init.ones_(p)
            elif name.endswith("proj.weight"):  # proj and fc_proj
                nn.init.normal_(p, std=proj_std)
            else:
                nn.init.normal_(p, std=std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def run(name, layers, heads, width, context, batch, steps=5):
    torch.manual_seed(1)
    model = Gpt(layers, heads, width, context)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.randint(0, VOCAB, (batch * context + 1,))
    idx = data[:-1].view(batch, context)
    targets = data[1:].view(batch, context)
    times = []
    for step in range(1 + steps):
        start = time.perf_counter()
        loss = model(idx, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        took = time.perf_counter() - start
        print(f"{name} step {step} loss {loss.item():.4f} {took:.3f} s",
              file=sys.stderr)
        if step > 0:
            times.append(took)
    print(f"torch_tokens_per_s {name} "
          f"{batch * context / statistics.median(times):.1f}", flush=True)


def main():
    torch.set_num_threads(os.cpu_count() or 1)
    for config in CONFIGS:
        run(*config)


if __name__ == "__main__":
    main()
