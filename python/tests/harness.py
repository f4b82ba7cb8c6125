"""What the Python tests share: worker processes of worker.py against a
strata.local.Cluster, and the reference run in one process."""

import os
import shutil
import subprocess
import sys
import tempfile

import torch

import strata
import tiny_gpt

HERE = os.path.dirname(os.path.abspath(__file__))


def start_worker(cluster, log, workers, *args, env=None):
    env = dict(os.environ, STRATA_SCHEDULER=cluster.scheduler,
               STRATA_WORKERS=str(workers), **(env or {}))
    with open(log + ".out", "wb") as out:
        return subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), "--log", log]
            + [str(a) for a in args],
            env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_all(procs, timeout=240):
    """Each process's exit code."""
    return [p.wait(timeout=timeout) for p in procs]


def output(log):
    with open(log + ".out", errors="replace") as f:
        return f.read()


def read_log(path):
    """{step: (samples, loss)} from a worker's log."""
    out = {}
    with open(path) as f:
        for line in f:
            step, samples, loss = line.split()
            out[int(step)] = (int(samples), float(loss))
    return out


def reference(steps, batch, lr, seed=3):
    """One process, torch.optim.AdamW on each step's whole batch (the
    ledger's samples in order): ([loss per step], {step: state dict at the
    start of that step})."""
    model = tiny_gpt.model()
    data = tiny_gpt.dataset()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.1)
    losses, states = [], {}
    for step in range(steps):
        states[step] = {k: v.clone() for k, v in model.state_dict().items()}
        indices = [strata.shuffled_index(g, len(data), seed)
                   for g in range(step * batch, (step + 1) * batch)]
        x, y = tiny_gpt.batch(data, indices)
        loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    states[steps] = {k: v.clone() for k, v in model.state_dict().items()}
    return losses, states


def fresh_dir(test, name):
    """A new directory, removed when `test` (a TestCase) ends."""
    d = tempfile.mkdtemp(prefix=f"strata-py-{name}-")
    test.addCleanup(shutil.rmtree, d, True)
    return d
