"""SSP and ASP jobs of Python workers converge; a Python worker killed
with SIGKILL mid-run leaves the others to finish, every sample once."""

import os
import signal
import time
import unittest

import harness
import strata.local

BATCH = 8


def losses(logs):
    out = []
    for path in logs:
        out += [loss for _, (_, loss) in sorted(harness.read_log(path).items())]
    return out


class Elastic(unittest.TestCase):
    def run_job(self, consistency, steps, kill=False, sig=signal.SIGKILL):
        d = harness.fresh_dir(self, consistency.replace(":", ""))
        logs = [os.path.join(d, f"w{i}.log") for i in range(3 if kill else 2)]
        with strata.local.Cluster(servers=2, consistency=consistency,
                                  lease_ms=1000) as cluster:
            # A killed worker's run also clips: its survivors' commits
            # overlap their next pulls and may be the ones overtaken.
            extra = ["--sleep", "0.05", "--grad_clip", 1.0] if kill else []
            procs = [harness.start_worker(
                cluster, log, len(logs), "--steps", steps, "--batch", BATCH,
                "--mark_at", 5, *extra) for log in logs]
            if kill:
                victim = procs[-1]
                deadline = time.monotonic() + 120
                while not os.path.exists(logs[-1] + ".mark"):
                    self.assertLess(time.monotonic(), deadline,
                                    harness.output(logs[-1]))
                    self.assertIsNone(victim.poll(), harness.output(logs[-1]))
                    time.sleep(0.02)
                victim.send_signal(sig)
                code = victim.wait(timeout=120)
                if sig == signal.SIGTERM:
                    self.assertEqual(code, 0, harness.output(logs[-1]))
                procs = procs[:-1]
            for log, code in zip(logs, harness.wait_all(procs)):
                self.assertEqual(code, 0, harness.output(log))
            ledger = cluster.run("ledger", "--scheduler", cluster.scheduler,
                                 "--check", check=False)
        self.assertEqual(ledger.returncode, 0, ledger.stdout + ledger.stderr)
        self.assertIn(f"samples {steps * BATCH} ", ledger.stdout)
        return logs

    def assert_converges(self, logs):
        first = losses(logs)[:4]
        last = [l for path in logs
                for l in [v[1] for _, v in
                          sorted(harness.read_log(path).items())][-4:]]
        self.assertLess(sum(last) / len(last), 0.8 * sum(first) / len(first))

    def test_ssp_converges(self):
        self.assert_converges(self.run_job("ssp:2", 60))

    def test_asp_converges(self):
        self.assert_converges(self.run_job("asp", 60))

    def test_bsp_survives_a_killed_worker(self):
        logs = self.run_job("bsp", 40, kill=True)
        survivors = [harness.read_log(p) for p in logs[:2]]
        self.assertEqual(sorted(set(survivors[0]) | set(survivors[1])),
                         list(range(40)))

    def test_asp_survives_a_killed_worker(self):
        self.run_job("asp", 40, kill=True)

    def test_sigterm_leaves_after_the_step(self):
        logs = self.run_job("bsp", 40, kill=True, sig=signal.SIGTERM)
        # It left cleanly; the other computed every step it did not.
        self.assertIn("worker done", harness.output(logs[-1]))
        steps = [set(harness.read_log(p)) for p in logs]
        self.assertEqual(sorted(steps[0] | steps[1]), list(range(40)))


if __name__ == "__main__":
    unittest.main()
