"""A PyTorch mixture-of-experts model through the servers (strata.torch):
an expert no token of a worker's step reached has no gradient, and goes
as a zero push without payload. Two BSP workers on half the batch each
then compute what one computes on the whole batch (an expert one worker's
tokens reached gets that worker's gradient and the other's zero push,
weighted by samples as zeros would be)."""

import os
import re
import unittest

import torch

import harness
import strata.local

STEPS, BATCH, LR, EXPERTS = 12, 8, 1e-2, 16


def run(test, name, workers):
    """Trains STEPS steps with `workers` Python workers; returns the state
    dict rank 0 pulled for step 10, and `strata status` at the end."""
    d = harness.fresh_dir(test, name)
    logs = [os.path.join(d, f"w{i}.log") for i in range(workers)]
    weights = [os.path.join(d, f"w{i}.pt") for i in range(workers)]
    with strata.local.Cluster(servers=2, consistency="bsp") as cluster:
        procs = [harness.start_worker(
            cluster, logs[i], workers, "--steps", STEPS, "--batch", BATCH,
            "--lr", LR, "--experts", EXPERTS, "--weights_at", 10,
            "--weights", weights[i],
            # Deferred pushes, zero pushes among them, and commits; a bound
            # the norm never reaches.
            "--grad_clip", 100)
            for i in range(workers)]
        for i, code in enumerate(harness.wait_all(procs)):
            test.assertEqual(code, 0, harness.output(logs[i]))
        status = cluster.run("status", "--scheduler", cluster.scheduler,
                             check=False)
        ledger = cluster.run("ledger", "--scheduler", cluster.scheduler,
                             "--check", check=False)
    test.assertEqual(status.returncode, 0, status.stderr)
    test.assertEqual(ledger.returncode, 0, ledger.stdout + ledger.stderr)
    test.assertIn(f"samples {STEPS * BATCH} ", ledger.stdout)
    return torch.load(weights[0]), status.stdout


def zero_pushes(status):
    return sum(int(n) for n in re.findall(r"zero pushes (\d+)", status))


class MoeThroughTheServers(unittest.TestCase):
    def test_two_workers_match_one_with_idle_experts(self):
        one, one_status = run(self, "moe-one", 1)
        two, two_status = run(self, "moe-two", 2)
        # Idle experts went as zero pushes in both runs.
        self.assertGreater(zero_pushes(one_status), 0, one_status)
        self.assertGreater(zero_pushes(two_status), 0, two_status)
        top = max(v.abs().max().item() for v in one.values())
        diffs = {n: (two[n] - w).abs().max().item() for n, w in one.items()}
        for name, diff in diffs.items():
            self.assertLessEqual(diff, 1e-5 * top, f"{name}: {diffs}")
        # The weights moved (the comparison is not vacuous).
        start = harness.tiny_gpt.model(experts=EXPERTS).state_dict()
        self.assertGreater(max((one[n] - w).abs().max().item()
                               for n, w in start.items()), 1e-3)


if __name__ == "__main__":
    unittest.main()
