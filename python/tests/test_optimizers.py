"""LAMB and Adafactor on the servers against independent PyTorch
implementations written here (from the papers, and Hugging Face's
Adafactor for its options): tensors cut into chunks that split matrices
across 2 servers under BSP, 20 steps of random gradients pushed by one
client, the weights pulled after every step and compared. The servers add
their norms up chunk by chunk in another order than torch does, so the
results cannot be bit-equal: the bound is 1e-6 of the largest weight."""

import math
import unittest

import numpy as np
import torch

import strata
import strata.local
import strata.model

STEPS = 20


def lamb_step(w, g, st, t, lr, b1, b2, eps, wd):
    """LAMB (You et al. 2019, Algorithm 2) with bias correction."""
    st["m"] = b1 * st["m"] + (1 - b1) * g
    st["v"] = b2 * st["v"] + (1 - b2) * g * g
    m_hat = st["m"] / (1 - b1 ** t)
    v_hat = st["v"] / (1 - b2 ** t)
    u = m_hat / (v_hat.sqrt() + eps) + wd * w
    w_norm = w.double().norm().item()
    u_norm = u.double().norm().item()
    trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
    return w - (lr * trust) * u


def rms(x):
    return x.double().pow(2).mean().sqrt().item()


def adafactor_step(w, g, st, t, o):
    """Adafactor (Shazeer and Stern 2018) as Hugging Face runs it: relative
    step, parameter scaling, update clipping, a first moment; a tensor of
    two or more dimensions factored as (leading dimensions) x (last)."""
    rho = min(1e-2, 1 / math.sqrt(t))
    alpha = rho * max(o["eps2"], rms(w))
    beta2t = 1 - t ** o["decay_rate"]
    sq = g * g + o["eps1"]
    if w.dim() >= 2:
        cols = w.shape[-1]
        sq2 = sq.reshape(-1, cols)
        st["r"] = beta2t * st["r"] + (1 - beta2t) * sq2.mean(dim=1)
        st["c"] = beta2t * st["c"] + (1 - beta2t) * sq2.mean(dim=0)
        r_factor = (st["r"] / st["r"].mean()).rsqrt().unsqueeze(1)
        c_factor = st["c"].rsqrt().unsqueeze(0)
        u = (r_factor * c_factor * g.reshape(-1, cols)).reshape(w.shape)
    else:
        st["v"] = beta2t * st["v"] + (1 - beta2t) * sq
        u = st["v"].rsqrt() * g
    u = u / max(1.0, rms(u) / o["clip"])
    u = u * alpha
    st["m"] = o["beta1"] * st["m"] + (1 - o["beta1"]) * u
    w = w + (-o["wd"] * alpha) * w
    return w - st["m"]


class TensorSumOptimizersTest(unittest.TestCase):
    def setUp(self):
        self.cluster = strata.local.Cluster(servers=2, consistency="bsp")
        self.cluster.__enter__()

    def tearDown(self):
        self.cluster.__exit__(None, None, None)

    def run_job(self, group, shapes, reference, chunk_bytes):
        """Pushes STEPS random gradients to tensors of `shapes`, checks the
        servers' weights after each step against reference(name, w, g, t)."""
        c = strata.Client(scheduler=self.cluster.scheduler)
        names = [f"t{i}" for i in range(len(shapes))]
        c.register([strata.model.tensor(n, s, group["name"],
                                        {"kind": "normal", "scale": 0.5,
                                         "seed": 7})
                    for n, s in zip(names, shapes)],
                   [group], chunk_bytes=chunk_bytes)
        self.assertGreater(c.chunks, 2 * len(shapes))  # matrices are cut
        got = {n: np.empty(s, np.float32) for n, s in zip(names, shapes)}
        for n in names:
            c.pull(n, got[n]).wait()
        ref = {n: torch.from_numpy(got[n].copy()) for n in names}
        start = {n: got[n].copy() for n in names}
        rng = np.random.default_rng(1)
        worst = 0.0
        for step in range(STEPS):
            grads = {n: (rng.standard_normal(s) * 0.1).astype(np.float32)
                     for n, s in zip(names, shapes)}
            for n in names:
                c.push(n, grads[n], step=step).wait()
            c.reduce(step)
            for n in names:
                c.pull(n, got[n], min_version=step + 1).wait()
                ref[n] = reference(n, ref[n], torch.from_numpy(grads[n]),
                                   step + 1)
                diff = np.abs(got[n] - ref[n].numpy()).max()
                biggest = np.abs(ref[n].numpy()).max()
                worst = max(worst, diff / biggest)
                self.assertLessEqual(diff, 1e-6 * biggest,
                                     f"{n} after step {step}")
        # The steps moved every tensor far beyond the bound.
        for n in names:
            moved = np.abs(got[n] - start[n]).max()
            self.assertGreater(moved, 1e-3 * np.abs(start[n]).max())
        print(f"worst relative difference {worst:.3g}")
        return worst

    def test_lamb_matches_pytorch_on_tensors_cut_across_servers(self):
        lr, b1, b2, eps, wd = 0.02, 0.9, 0.999, 1e-6, 0.01
        group = strata.model.group("g", optimizer="lamb", lr=lr,
                                   betas=(b1, b2), eps=eps, weight_decay=wd)
        shapes = [(24, 10), (150,), (3, 4, 9)]
        state = {f"t{i}": {"m": torch.zeros(s), "v": torch.zeros(s)}
                 for i, s in enumerate(shapes)}

        def reference(name, w, g, t):
            return lamb_step(w, g, state[name], t, lr, b1, b2, eps, wd)

        # 64-element chunks: rows of 10 and 9 are cut mid-row.
        self.run_job(group, shapes, reference, chunk_bytes=256)

    def test_adafactor_matches_pytorch_on_tensors_cut_across_servers(self):
        o = {"eps1": 1e-30, "eps2": 1e-3, "clip": 1.0, "decay_rate": -0.8,
             "beta1": 0.9, "wd": 0.01}
        group = strata.model.group("g", optimizer="adafactor", lr=0.0,
                                   betas=(o["beta1"], 0.0),
                                   weight_decay=o["wd"])
        shapes = [(24, 10), (150,), (3, 4, 9)]
        state = {}
        for i, s in enumerate(shapes):
            cols = s[-1]
            rows = int(np.prod(s)) // cols
            state[f"t{i}"] = ({"r": torch.zeros(rows), "c": torch.zeros(cols),
                               "m": torch.zeros(s)} if len(s) >= 2 else
                              {"v": torch.zeros(s), "m": torch.zeros(s)})

        def reference(name, w, g, t):
            return adafactor_step(w, g, state[name], t, o)

        # Chunks of whole rows (the client cuts them so): 6 rows of 10, 7
        # rows of 9; the vector in 64-element pieces.
        self.run_job(group, shapes, reference, chunk_bytes=256)

    def test_adafactor_chunks_hold_whole_rows_and_bad_options_fail(self):
        c = strata.Client(scheduler=self.cluster.scheduler)
        group = strata.model.group("g", optimizer="adafactor", lr=0.01,
                                   relative_step=False)
        # A row longer than a chunk: the client still cuts at whole rows.
        c.register([strata.model.tensor("wide", (2, 100), "g")], [group],
                   chunk_bytes=256)
        self.assertEqual(c.chunks, 2)
        with self.assertRaisesRegex(ValueError, "relative_step"):
            c2 = strata.Client(scheduler=self.cluster.scheduler)
            c2.register([strata.model.tensor("x", (4,), "h")],
                        [strata.model.group("h", optimizer="adafactor",
                                            lr=0.01)])


if __name__ == "__main__":
    unittest.main()
