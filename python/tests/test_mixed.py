"""A Python worker (examples/pytorch/strata_gpt_worker.py: Strata's GPT in
PyTorch) and a C++ worker (`strata worker`) train one BSP job together and
end at the weights two C++ workers reach."""

import os
import subprocess
import sys
import unittest

import numpy as np

import harness
import strata.gpt
import strata.local

ROOT = os.path.join(harness.HERE, "..", "..")
SHAPE = ["--layers", "2", "--heads", "2", "--width", "32", "--context", "16"]
JOB = ["--batch", "8", "--steps", "12", "--seed", "3", "--lr", "3e-3",
       "--warmup", "2", "--grad_clip", "0"]


def corpus(d):
    path = os.path.join(d, "corpus.txt")
    with open(path, "w") as f:
        for i in range(400):
            f.write(f"line {i}: the quick brown fox jumps over dog {i % 7}\n")
    return path


class MixedJob(unittest.TestCase):
    def run_job(self, d, name, python, data):
        log = os.path.join(d, name)
        weights = os.path.join(d, name + ".bin")
        with strata.local.Cluster(servers=2, consistency="bsp") as cluster:
            common = SHAPE + JOB + ["--data", data, "--weights_out", weights]
            cpp = [cluster.binary, "worker", "--scheduler", cluster.scheduler,
                   "--workers", "2", "--eval_every", "0"] + common
            procs = []
            with open(log + ".cpp.out", "wb") as out:
                procs.append(subprocess.Popen(cpp, stdout=out,
                                              stderr=subprocess.STDOUT))
            if python:
                env = dict(os.environ, STRATA_SCHEDULER=cluster.scheduler,
                           STRATA_WORKERS="2")
                script = os.path.join(ROOT, "examples", "pytorch",
                                      "strata_gpt_worker.py")
                with open(log + ".py.out", "wb") as out:
                    procs.append(subprocess.Popen(
                        [sys.executable, script] + common, env=env,
                        stdout=out, stderr=subprocess.STDOUT))
            else:
                with open(log + ".cpp2.out", "wb") as out:
                    procs.append(subprocess.Popen(cpp, stdout=out,
                                                  stderr=subprocess.STDOUT))
            for proc, kind in zip(procs, ["cpp", "py" if python else "cpp2"]):
                code = proc.wait(timeout=240)
                with open(f"{log}.{kind}.out", errors="replace") as f:
                    self.assertEqual(code, 0, f.read())
            ledger = cluster.run("ledger", "--scheduler", cluster.scheduler,
                                 "--check", check=False)
        self.assertEqual(ledger.returncode, 0, ledger.stdout + ledger.stderr)
        self.assertIn("samples 96 ", ledger.stdout)
        return np.fromfile(weights, dtype="<f4")

    def test_a_python_and_a_cpp_worker_match_two_cpp_workers(self):
        d = harness.fresh_dir(self, "mixed")
        data = corpus(d)
        two_cpp = self.run_job(d, "cpp", python=False, data=data)
        mixed = self.run_job(d, "mixed", python=True, data=data)
        self.assertEqual(two_cpp.size, mixed.size)
        with open(os.path.join(d, "mixed.py.out")) as f:
            steps = {line.split()[5] for line in f
                     if line.startswith("python worker")}
        # It computed a share of every step (a redo prints a step twice).
        self.assertEqual(len(steps), 12, steps)
        # Compare tensor by tensor, leaving out the key bias (its gradient
        # is zero up to rounding, which Adam turns into full steps that no
        # two summation orders share). Elements whose gradient is near zero
        # move by Adam's noise too, so the bound is 5e-5 of the largest
        # weight (differences seen: up to 6.5e-6 of it); another model's
        # math moves weights by about lr per step (3e-3 here).
        model = strata.gpt.Gpt(2, 2, 32, 16)
        top = float(np.abs(two_cpp).max())
        offset = 0
        for name, p in model.named_parameters():
            n = p.numel()
            a, b = two_cpp[offset:offset + n], mixed[offset:offset + n]
            if name.endswith("attn.qkv.bias"):
                a = np.concatenate([a[:32], a[64:]])
                b = np.concatenate([b[:32], b[64:]])
            diff = float(np.abs(a - b).max())
            self.assertLessEqual(diff, 5e-5 * top, name)
            offset += n


if __name__ == "__main__":
    unittest.main()
