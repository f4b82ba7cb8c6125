"""A nanoGPT-style GPT in plain PyTorch, trained through Strata's servers.

Run it as Strata workers (the scheduler's address comes from the launcher):

    python -m strata.run --scheduler HOST:PORT --nproc 2 nanogpt.py

or start a scheduler, two servers and two of these workers on this machine
with `python3 examples/pytorch/train_local.py`. The data is byte-level text
(the license texts every Debian system has, or --data FILE); every window of
--context + 1 bytes is one sample.
"""

import argparse
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import strata.torch as st


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)),
                                       approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, context, layers, heads, width):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads)
                                    for _ in range(layers))
        self.lnf = nn.LayerNorm(width)
        for name, p in self.named_parameters():  # GPT-2's initialization
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / (math.sqrt(2 * layers)
                              if name.endswith("proj.weight") else 1)
                nn.init.normal_(p, std=std)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               targets.reshape(-1))


def read_bytes(path):
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
    return np.concatenate([np.fromfile(f, dtype=np.uint8) for f in files])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/common-licenses")
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--batch", type=int, default=16, help="over all workers")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=3e-3)
    a = p.parse_args()

    text = torch.from_numpy(read_bytes(a.data).astype(np.int64))
    windows = (len(text) - 1) // a.context
    torch.manual_seed(0)
    model = Gpt(256, a.context, a.layers, a.heads, a.width)
    opt = st.DistributedOptimizer(
        model.named_parameters(), lr=a.lr, weight_decay=0.1, grad_clip=1.0,
        warmup_steps=10, total_steps=a.steps, min_lr_ratio=0.1,
        # nanoGPT decays matrices only.
        groups=[{"params": [n for n, q in model.named_parameters()
                            if q.dim() < 2], "weight_decay": 0.0}])
    sampler = st.ElasticSampler(opt, num_samples=windows,
                                batch_size=a.batch, steps=a.steps)
    for indices in sampler:
        starts = torch.tensor(indices) * a.context
        rows = torch.stack([text[s:s + a.context + 1] for s in starts])
        loss = model(rows[:, :-1], rows[:, 1:])
        loss.backward()
        applied = opt.step()
        opt.zero_grad()
        step = sampler.current
        if applied and (step.step % 20 == 0 or step.step + 1 == a.steps):
            print(f"rank {step.rank}/{step.workers} step {step.step} "
                  f"loss {loss.item():.4f} grad_norm {opt.grad_norm:.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
