#!/usr/bin/env python3
"""PyTorch reference for bench/gpu_train.sh: the GPT of bench/torch_ref.py
(the same shapes as bench/gpu_train_bench.cc) trained on random tokens on one
GPU the way a tuned PyTorch trainer does it: bf16 autocast, fused AdamW,
flash attention through scaled_dot_product_attention, TF32 matmuls, and
torch.compile unless --no-compile. Prints
`torch_gpu_tokens_per_s <config> <tokens/s>` from the median step time after
warm-up steps, with the config named as gpu_train_bench names it."""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import Gpt  # noqa: E402

SHAPES = {
    "gpt2_124M": (12, 12, 768),
    "gpt2_350M": (24, 16, 1024),
    "gpt2_774M": (36, 20, 1280),
    "gpt2_1558M": (48, 25, 1600),
}


def run(name, batch, context, steps, warmup, compile_model):
    layers, heads, width = SHAPES[name]
    torch.manual_seed(1)
    dev = torch.device("cuda")
    model = Gpt(layers, heads, width, context).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                            fused=True)
    step_model = torch.compile(model) if compile_model else model
    data = torch.randint(0, 50257, (batch * context + 1,), device=dev)
    idx = data[:-1].view(batch, context)
    targets = data[1:].view(batch, context)
    label = f"{name}_B{batch}_T{context}"
    times = []
    for step in range(warmup + steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(idx, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()  # waits for the step, as gpu_train_bench does
        took = time.perf_counter() - start
        print(f"{label} step {step} loss {value:.4f} {1e3 * took:.1f} ms",
              file=sys.stderr)
        if step >= warmup:
            times.append(took)
    print(f"torch_gpu_tokens_per_s {label} "
          f"{batch * context / statistics.median(times):.0f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default="gpt2_124M", choices=sorted(SHAPES))
    ap.add_argument("--batch", default="8,16,32")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch sees no CUDA device: skipped", file=sys.stderr)
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    for b in args.batch.split(","):
        run(args.config, int(b), args.context, args.steps, args.warmup,
            not args.no_compile)


if __name__ == "__main__":
    main()
