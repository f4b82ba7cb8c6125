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


def train(test, cluster, logs, flags):
    """One Python worker per log, STEPS steps each in `cluster`, worker i
    with flags(i) added; each must exit 0."""
    procs = [harness.start_worker(
        cluster, log, len(logs), "--steps", STEPS, "--batch", BATCH,
        "--lr", LR, "--experts", EXPERTS, *flags(i))
        for i, log in enumerate(logs)]
    for log, code in zip(logs, harness.wait_all(procs)):
        test.assertEqual(code, 0, harness.output(log))


def run(test, name, workers):
    """Trains STEPS steps with `workers` Python workers; returns the state
    dict rank 0 pulled for step 10, and `strata status` at the end."""
    d = harness.fresh_dir(test, name)
    logs = [os.path.join(d, f"w{i}.log") for i in range(workers)]
    weights = [os.path.join(d, f"w{i}.pt") for i in range(workers)]
    with strata.local.Cluster(servers=2, consistency="bsp") as cluster:
        # Deferred pushes, zero pushes among them, and commits; a bound the
        # norm never reaches.
        train(test, cluster, logs, lambda i: ("--weights_at", 10, "--weights",
                                              weights[i], "--grad_clip", 100))
        status = cluster.run("status", "--scheduler", cluster.scheduler,
                             check=False)
        ledger = cluster.run("ledger", "--scheduler", cluster.scheduler,
                             "--check", check=False)
    test.assertEqual(status.returncode, 0, status.stderr)
    test.assertEqual(ledger.returncode, 0, ledger.stdout + ledger.stderr)
    test.assertIn(f"samples {STEPS * BATCH} ", ledger.stdout)
    return torch.load(weights[0]), status.stdout


def run_final(test, name, workers, *flags):
    """STEPS steps with `workers` Python workers: rank 0's final weights
    (pulled whole) and every worker's output."""
    d = harness.fresh_dir(test, name)
    logs = [os.path.join(d, f"w{i}.log") for i in range(workers)]
    finals = [os.path.join(d, f"final{i}.pt") for i in range(workers)]
    with strata.local.Cluster(servers=2, consistency="bsp") as cluster:
        train(test, cluster, logs, lambda i: ("--final", finals[i], *flags))
        ledger = cluster.run("ledger", "--scheduler", cluster.scheduler,
                             "--check", check=False)
    test.assertEqual(ledger.returncode, 0, ledger.stdout + ledger.stderr)
    test.assertIn(f"samples {STEPS * BATCH} ", ledger.stdout)
    return (torch.load(finals[0]),
            "".join(harness.output(log) for log in logs))


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


def expect_close(test, got, want):
    test.assertEqual(got.keys(), want.keys())
    top = max(v.abs().max().item() for v in want.values())
    for name, w in want.items():
        diff = (got[name] - w).abs().max().item()
        test.assertLessEqual(diff, 1e-5 * top, name)


class SparsePullsFromPython(unittest.TestCase):
    def test_pulling_experts_when_routed_trains_as_pulling_all(self):
        """experts=: an expert is pulled ahead only if the worker's last
        step called it, the others when forward first calls them, so a
        step's experts hold that step's weights either way. Two such
        workers end at the weights of one that pulls every expert on the
        whole batch (an expert the other worker moved, computed on older
        weights, would not), having moved fewer than all of the experts'
        bytes."""
        dense, _ = run_final(self, "pull-all", 1)
        sparse, out = run_final(self, "pull-routed", 2, "--sparse")
        shares = [float(m) for m in
                  re.findall(r"experts pulled \d+ ([0-9.e-]+)", out)]
        self.assertGreaterEqual(len(shares), STEPS, out)
        self.assertLess(min(shares), 1.0, shares)
        expect_close(self, sparse, dense)

    def test_a_step_whose_expert_pull_fails_is_computed_again(self):
        """A pull in forward that fails leaves the expert's weights old:
        the step pushes nothing, step() says False, and it is handed out
        again and computed on the right weights: the run ends where the
        dense one does, every sample used once (the ledger's check in
        run_final)."""
        dense, _ = run_final(self, "pull-all-again", 1)
        sparse, out = run_final(self, "pull-fails", 2, "--sparse",
                                "--fail_pull_at", 3)
        self.assertIn("failing a pull at step", out)
        self.assertIn("handed out again", out)
        expect_close(self, sparse, dense)


if __name__ == "__main__":
    unittest.main()
