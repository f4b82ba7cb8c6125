"""Two Python workers through two servers under BSP compute what one
process computes with torch.optim.AdamW on the whole batch."""
# The clipping path (pushes held until each step's commit) is used with a
# bound above every step's norm, so the reference needs no clipping.

import os
import unittest

import torch

import harness
import strata.local

STEPS, BATCH, LR = 50, 8, 1e-2


class BspMatchesOneProcess(unittest.TestCase):
    def test_two_workers_match_adamw_on_the_concatenated_batch(self):
        d = harness.fresh_dir(self, "bsp")
        logs = [os.path.join(d, f"w{i}.log") for i in range(2)]
        weights = [os.path.join(d, f"w{i}.pt") for i in range(2)]
        with strata.local.Cluster(servers=2, consistency="bsp") as cluster:
            procs = [harness.start_worker(
                cluster, logs[i], 2, "--steps", STEPS, "--batch", BATCH,
                "--lr", LR, "--weights_at", 10, "--weights", weights[i],
                # Deferred pushes and commits overlapped with the next
                # pulls, with a bound the norm never reaches: no scaling.
                "--grad_clip", 100)
                for i in range(2)]
            codes = harness.wait_all(procs)
            for i, code in enumerate(codes):
                self.assertEqual(code, 0, harness.output(logs[i]))
            ledger = cluster.run("ledger", "--scheduler", cluster.scheduler,
                                 "--check", check=False)
        self.assertEqual(ledger.returncode, 0, ledger.stdout + ledger.stderr)
        self.assertIn(f"samples {STEPS * BATCH} ", ledger.stdout)

        want_losses, want_states = harness.reference(STEPS, BATCH, LR)
        # After 10 steps both workers pulled the weights one process has.
        for path in weights:
            got = torch.load(path)
            top = max(v.abs().max().item() for v in want_states[10].values())
            diffs = {name: (got[name] - want).abs().max().item()
                     for name, want in want_states[10].items()}
            for name, diff in diffs.items():
                self.assertLessEqual(diff, 1e-5 * top, f"{name}: {diffs}")
        # Each step's loss, the sample-weighted mean of the two workers'
        # losses, tracks the one process's.
        runs = [harness.read_log(p) for p in logs]
        for step in range(STEPS):
            parts = [r[step] for r in runs if step in r]
            samples = sum(n for n, _ in parts)
            self.assertEqual(samples, BATCH, f"step {step}")
            loss = sum(n * l for n, l in parts) / samples
            self.assertAlmostEqual(loss, want_losses[step], delta=1e-3,
                                   msg=f"step {step}")
        self.assertLess(want_losses[-1], want_losses[0] * 0.8)


if __name__ == "__main__":
    unittest.main()
