"""A Python worker of the tests: trains tiny_gpt through Strata's servers
with strata.torch, as a user's script would. Writes one line per applied
step to --log ("step samples loss") and, with --weights_at S, the weights
it pulled for step S to --weights (torch.save of the state dict)."""

import argparse
import os
import time

import torch

import strata.torch as st
import tiny_gpt


class FailingPull:
    """A session whose first pull at or after step `at` raises."""

    def __init__(self, session, at):
        self._session, self._at, self.failed = session, at, False

    def __getattr__(self, name):
        return getattr(self._session, name)

    def pull(self, tensors, weights):
        if not self.failed and self._session.step >= self._at:
            self.failed = True
            print("failing a pull at step", self._session.step, flush=True)
            raise st._strata.StrataError("injected: the pull failed")
        return self._session.pull(tensors, weights)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--grad_clip", type=float, default=0.0)
    p.add_argument("--log", required=True)
    p.add_argument("--weights_at", type=int, default=-1)
    p.add_argument("--weights", default="")
    p.add_argument("--final", default="", help="final weights here")
    p.add_argument("--sleep", type=float, default=0.0,
                   help="seconds per step (a slow worker)")
    p.add_argument("--experts", type=int, default=0,
                   help="a top-1 mixture of this many experts per block")
    p.add_argument("--sparse", action="store_true",
                   help="with --experts, pull each expert only when routed "
                   "to (strata.torch experts=)")
    p.add_argument("--fail_pull_at", type=int, default=-1,
                   help="with --sparse, the first expert pull at or after "
                   "this step fails (as a server's error would)")
    p.add_argument("--mark_at", type=int, default=-1,
                   help="touch <log>.mark after this many applied steps")
    a = p.parse_args()

    model = tiny_gpt.model(experts=a.experts)
    data = tiny_gpt.dataset()
    experts = ([e for b in model.blocks for e in b.moe.experts]
               if a.sparse else None)
    opt = st.DistributedOptimizer(model.named_parameters(), lr=a.lr,
                                  weight_decay=0.1, grad_clip=a.grad_clip,
                                  experts=experts)
    if a.fail_pull_at >= 0:
        opt.session = FailingPull(opt.session, a.fail_pull_at)
    sampler = st.ElasticSampler(opt, num_samples=len(data),
                                batch_size=a.batch, steps=a.steps, seed=3)
    applied = 0
    with open(a.log, "w", buffering=1) as log:
        for indices in sampler:
            step = sampler.current.step
            if step == a.weights_at and a.weights:
                torch.save(model.state_dict(), a.weights)
            x, y = tiny_gpt.batch(data, indices)
            loss = model(x, y)
            loss.backward()
            if a.sleep:
                time.sleep(a.sleep)
            if opt.step():
                applied += 1
                if a.sparse:
                    print("experts pulled", step, opt.experts_pulled,
                          flush=True)
                log.write(f"{step} {len(indices)} {loss.item():.9g}\n")
                if applied == a.mark_at:
                    open(a.log + ".mark", "w").close()
            opt.zero_grad()
    if a.final:
        torch.save(model.state_dict(), a.final)
    opt.close()
    print("worker done", os.getpid(), "applied", applied, flush=True)


if __name__ == "__main__":
    main()
