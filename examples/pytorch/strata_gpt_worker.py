"""A Python worker that trains Strata's own GPT in one job with C++ workers
(`strata worker`): the same model registered with the servers
(strata.gpt.server_model), the same windows of the same --data
(strata.TokenDataset), its share of each step leased from the same ledger.
Give it the flags the C++ workers of the job have (the model's, --data,
--batch, --steps, --seed, --lr, --warmup, --weight_decay, --min_lr_ratio,
--grad_clip); the servers refuse a model that differs.

    python -m strata.run --scheduler HOST:PORT --workers 2 \\
        strata_gpt_worker.py --layers 2 --heads 2 --width 64 --context 64
"""

import argparse

import numpy as np
import torch

import strata
import strata.gpt
import strata.torch as st


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/common-licenses")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--weight_decay", type=float, default=0.1)
    p.add_argument("--min_lr_ratio", type=float, default=0.1)
    p.add_argument("--grad_clip", type=float, default=1.0)
    p.add_argument("--weights_out", default="",
                   help="the final weights, every tensor fp32 in order")
    a = p.parse_args()

    data = strata.TokenDataset(a.data, a.vocab, a.context)
    model = strata.gpt.Gpt(a.layers, a.heads, a.width, a.context, a.vocab)
    spec = strata.gpt.server_model(
        model.config, lr=a.lr, weight_decay=a.weight_decay,
        warmup_steps=a.warmup, steps=a.steps, min_lr_ratio=a.min_lr_ratio,
        seed=a.seed)
    opt = st.DistributedOptimizer(model.named_parameters(), spec=spec,
                                  grad_clip=a.grad_clip)
    sampler = st.ElasticSampler(opt, num_samples=data.windows(),
                                batch_size=a.batch, steps=a.steps,
                                seed=a.seed, shuffle=False)
    for samples in sampler:
        # A BSP share is one run of consecutive samples; SSP/ASP may hand
        # out several.
        parts = [data.batch(s, 1, a.seed) for s in samples]
        tokens = torch.from_numpy(np.concatenate([t for t, _ in parts]))
        targets = torch.from_numpy(np.concatenate([y for _, y in parts]))
        loss = model(tokens.long(), targets.long())
        loss.backward()
        applied = opt.step()
        opt.zero_grad()
        step = sampler.current
        if applied:
            print(f"python worker rank {step.rank}/{step.workers} step "
                  f"{step.step} samples {len(samples)} loss "
                  f"{loss.item():.6f}", flush=True)
    if a.weights_out:
        with open(a.weights_out, "wb") as f:
            for _, p in model.named_parameters():
                f.write(p.detach().numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
