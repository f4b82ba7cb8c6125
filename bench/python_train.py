"""A PyTorch GPT (bench/torch_ref.py's, GPT-2's initialization) trained on
the CPU on random tokens, in one process with torch.optim.AdamW (--mode
local) or through Strata's servers with strata.torch (--mode servers:
AdamW on the servers, gradients clipped to norm 1 with the pushes
overlapped, as `strata worker` does by default). Prints
`python_tokens_per_s_<mode> <config> <x>` from the median step time after
one warm-up step (a step through the servers counted from its pull to the
servers' answer)."""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("local", "servers"), required=True)
    p.add_argument("--scheduler", default="")
    p.add_argument("--config", default="L12_C768_H12_B4_T64")
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    name, layers, heads, width, context, batch = next(
        c for c in torch_ref.CONFIGS if c[0] == a.config)
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(1)
    model = torch_ref.Gpt(layers, heads, width, context)
    samples = 64
    data = torch.randint(0, torch_ref.VOCAB, (samples, context + 1))
    times = []
    if a.mode == "local":
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        for step in range(1 + a.steps):
            t0 = time.perf_counter()
            rows = data[[(step * batch + i) % samples for i in range(batch)]]
            loss = model(rows[:, :-1].contiguous(), rows[:, 1:].contiguous())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            t1 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            t2 = time.perf_counter()
            print(f"compute {t1 - t0:.3f} s optimizer {t2 - t1:.3f} s",
                  file=sys.stderr)
            times.append(t2 - t0)
    else:
        import strata.torch as st
        opt = st.DistributedOptimizer(model.named_parameters(), lr=3e-4,
                                      weight_decay=0.1, grad_clip=1.0,
                                      scheduler=a.scheduler, workers=1)
        sampler = st.ElasticSampler(opt, num_samples=samples,
                                    batch_size=batch, steps=1 + a.steps)
        t0 = time.perf_counter()
        for indices in sampler:
            t1 = time.perf_counter()  # pulled and leased
            rows = data[indices]
            loss = model(rows[:, :-1].contiguous(), rows[:, 1:].contiguous())
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            opt.zero_grad()
            t3 = time.perf_counter()
            print(f"begin {t1 - t0:.3f} s compute {t2 - t1:.3f} s "
                  f"end {t3 - t2:.3f} s", file=sys.stderr)
            times.append(t3 - t0)
            t0 = time.perf_counter()
    for step, took in enumerate(times):
        print(f"{name} step {step} {took:.3f} s", file=sys.stderr)
    print(f"python_tokens_per_s_{a.mode} {name} "
          f"{batch * context / statistics.median(times[1:]):.1f}", flush=True)


if __name__ == "__main__":
    main()
