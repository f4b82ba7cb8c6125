"""Push+pull throughput of one Python client (strata.Client) against the
servers at --scheduler: registers a model of --numel float32 parameters in
--chunk_mib MiB chunks (plain SGD, the cheapest real update), then per round
pushes and pulls the whole model, both in flight at once, from numpy
arrays. Prints `python_pushpull_GBps <x>`: bytes pushed plus bytes pulled
per second, best of --repeats (what bench/pushpull_bench prints for the C++
client)."""

import argparse
import time

import numpy as np

import strata


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--scheduler", required=True)
    p.add_argument("--numel", type=int, required=True)
    p.add_argument("--chunk_mib", type=int, default=4)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shm", type=int, default=1)
    a = p.parse_args()
    c = strata.Client(scheduler=a.scheduler, shared_memory=bool(a.shm))
    name = f"python_bench_{a.chunk_mib}MiB"
    c.register([strata.model.tensor(name, [a.numel], "python_sgd")],
               [strata.model.group("python_sgd", optimizer="sgd", lr=1e-6)],
               chunk_bytes=a.chunk_mib << 20)
    grad = np.full(a.numel, 1e-3, np.float32)
    weights = np.empty(a.numel, np.float32)

    def round_(step):
        push = c.push(name, grad, step=step)
        pull = c.pull(name, weights)
        push.wait()
        pull.wait()

    round_(0)  # warm-up: connections, pages
    best, step = 0.0, 1
    for r in range(a.repeats):
        t0 = time.perf_counter()
        for _ in range(a.rounds):
            round_(step)
            step += 1
        gbps = 2.0 * a.rounds * a.numel * 4 / (time.perf_counter() - t0) / 1e9
        print(f"repeat {r}: {gbps:.3f} GB/s", flush=True)
        best = max(best, gbps)
    print(f"python_pushpull_GBps {best:.3f}")


if __name__ == "__main__":
    main()
