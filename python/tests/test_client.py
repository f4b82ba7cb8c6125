"""strata.Client against real servers: pushes and pulls of numpy arrays
and torch tensors, and bad input refused with nothing pushed."""

import unittest

import numpy as np
import torch

import strata
import strata.local


def sgd(lr=1.0):
    return strata.model.group("main", optimizer="sgd", lr=lr)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import strata.model  # noqa: F401
        cls.cluster = strata.local.Cluster(servers=2, consistency="asp")
        cls.cluster.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.__exit__(None, None, None)

    def client(self, **kw):
        return strata.Client(scheduler=self.cluster.scheduler, **kw)

    def register(self, client, prefix, shape=(64, 3), init=0.5):
        # Small chunks, so a tensor spans both servers.
        client.register(
            [strata.model.tensor(prefix + "w", shape, "main",
                                 {"kind": "constant", "scale": init}),
             strata.model.tensor(prefix + "b", (5,), "main")],
            [sgd()], chunk_bytes=256)

    def test_push_then_pull_applies_sgd_on_every_chunk(self):
        c = self.client()
        self.register(c, "a.")
        self.assertGreater(c.chunks, 2)
        w = np.empty((64, 3), np.float32)
        c.pull("a.w", w).wait()
        np.testing.assert_array_equal(w, 0.5)
        grad = np.arange(192, dtype=np.float32).reshape(64, 3) / 100
        c.push("a.w", grad, step=0).wait()
        c.pull("a.w", w, min_version=1).wait()
        np.testing.assert_allclose(w, 0.5 - grad, rtol=0, atol=1e-6)

    def test_torch_tensors_are_pulled_in_place(self):
        c = self.client()
        self.register(c, "t.")
        t = torch.zeros(5)
        view = t.numpy()
        c.push("t.b", -torch.ones(5).numpy(), step=0).wait()
        c.pull(c.index("t.b"), view, min_version=1).wait()
        self.assertTrue(torch.equal(t, torch.ones(5)))

    def test_bf16_on_the_wire_rounds_to_bf16(self):
        c = self.client(push_dtype="bf16", pull_dtype="bf16",
                        shared_memory=False)
        self.register(c, "h.", init=0.0)
        w = np.empty((64, 3), np.float32)
        c.push("h.w", np.full((64, 3), -1 / 3, np.float32), step=0).wait()
        c.pull("h.w", w, min_version=1).wait()
        self.assertTrue(np.all(np.abs(w - 1 / 3) < 2e-3))
        self.assertTrue(np.all(w != np.float32(1 / 3)))  # it was rounded

    def test_bad_arrays_and_names_raise_and_push_nothing(self):
        c = self.client()
        self.register(c, "e.")
        with self.assertRaisesRegex(TypeError, "float32"):
            c.push("e.w", np.ones((64, 3), np.float64), step=0)
        with self.assertRaisesRegex(ValueError, "192 elements"):
            c.push("e.w", np.ones((64, 2), np.float32), step=0)
        with self.assertRaisesRegex(TypeError, "contiguous"):
            c.push("e.w", np.ones((3, 64), np.float32).T, step=0)
        with self.assertRaisesRegex(KeyError, "e.nope"):
            c.push("e.nope", np.ones(3, np.float32), step=0)
        with self.assertRaisesRegex(TypeError, "read-only"):
            ro = np.ones((64, 3), np.float32)
            ro.flags.writeable = False
            c.pull("e.w", ro)
        w = np.empty((64, 3), np.float32)
        c.pull("e.w", w).wait()
        np.testing.assert_array_equal(w, 0.5)  # nothing was applied

    def test_another_model_under_the_same_names_is_refused(self):
        self.register(self.client(), "m.")
        with self.assertRaises((strata.StrataError, ValueError)) as e:
            self.register(self.client(), "m.", shape=(65, 3))
        self.assertIn("m.w", str(e.exception))

    def test_bad_connection_settings_raise(self):
        with self.assertRaisesRegex(ValueError, "bf16"):
            self.client(push_dtype="f16")
        with self.assertRaisesRegex(ValueError, "cannot be read"):
            self.client(tls_cert="/nonexistent/worker.pem",
                        tls_key="/nonexistent/worker.key",
                        tls_ca="/nonexistent/ca.pem")

    def test_a_session_push_without_a_step_raises(self):
        s = strata.Session(
            scheduler=self.cluster.scheduler,
            tensors=[strata.model.tensor("s.w", (4,), "main")],
            groups=[sgd()])
        with self.assertRaises(strata.StrataError) as e:
            s.push(0, np.ones(4, np.float32))
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
        with self.assertRaises(strata.StrataError) as e:
            s.pull([0], [np.empty(4, np.float32)])
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
        with self.assertRaises(ValueError):
            s.pull([0], [])  # an array a tensor
        with self.assertRaises(strata.StrataError):
            s.begin([np.empty(4, np.float32)])  # set_job first
        s.leave()

    def test_async_lr_share_scales_a_push_by_its_share_of_the_batch(self):
        # ASP, SGD at lr 1: a push of ones moves each weight by the rate,
        # times the pusher's share of the step's batch with "share".
        with strata.local.Cluster(servers=1, consistency="asp") as cluster:
            tensors = [strata.model.tensor("lr.w", (4,), "main",
                                           {"kind": "constant", "scale": 0.5})]
            with self.assertRaises(ValueError):
                strata.Session(scheduler=cluster.scheduler, tensors=tensors,
                               groups=[sgd()], async_lr="half")
            sessions = [strata.Session(scheduler=cluster.scheduler,
                                       tensors=tensors, groups=[sgd()],
                                       async_lr="share") for _ in range(2)]
            for s in sessions:
                s.set_job(steps=4, batch=4, samples_per_epoch=16)
            w = np.empty(4, np.float32)
            step = sessions[0].begin([w])
            np.testing.assert_array_equal(w, 0.5)
            self.assertLess(step.samples, 4)  # two workers share the batch
            sessions[0].push(0, np.ones(4, np.float32))
            sessions[0].end()
            c = strata.Client(scheduler=cluster.scheduler)
            c.register(tensors, [sgd()])
            c.pull("lr.w", w, min_version=1).wait()
            np.testing.assert_allclose(w, 0.5 - step.samples / 4, atol=1e-6)
            for s in sessions:
                s.leave()

    def test_a_model_with_a_scalar_parameter_starts_from_its_weights(self):
        import torch
        import strata.torch as st

        class Scaled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.temperature = torch.nn.Parameter(torch.tensor(0.25))
                self.w = torch.nn.Parameter(torch.full((3,), 2.0))

        model = Scaled()
        opt = st.DistributedOptimizer(
            [("q." + n, p) for n, p in model.named_parameters()],
            scheduler=self.cluster.scheduler)
        with torch.no_grad():
            model.temperature.fill_(9.0)  # the servers hold 0.25
        sampler = st.ElasticSampler(opt, num_samples=1, batch_size=1,
                                    steps=1)
        next(iter(sampler))  # pulls the servers' weights
        self.assertEqual(model.temperature.item(), 0.25)
        self.assertTrue(torch.equal(model.w.detach(), torch.full((3,), 2.0)))
        opt.step()
        opt.leave()

    def test_an_init_function_says_how_the_servers_draw_each_tensor(self):
        import torch
        import strata.torch as st
        model = torch.nn.Linear(3, 2)
        # A cluster of its own: the other tests' ledger job is this one's.
        with strata.local.Cluster(servers=1, consistency="asp") as cluster:
            opt = st.DistributedOptimizer(
                model.named_parameters(), scheduler=cluster.scheduler,
                init=lambda name, p: {"kind": "constant",
                                      "scale": 3.0 if p.dim() > 1 else -1.0})
            sampler = st.ElasticSampler(opt, num_samples=1, batch_size=1,
                                        steps=1)
            next(iter(sampler))
            self.assertTrue(torch.equal(model.weight.detach(),
                                        torch.full((2, 3), 3.0)))
            self.assertTrue(torch.equal(model.bias.detach(),
                                        torch.full((2,), -1.0)))
            opt.step()
            opt.leave()

    def test_shuffled_index_permutes_each_epoch(self):
        n = 37
        first = [strata.shuffled_index(g, n, 5) for g in range(n)]
        second = [strata.shuffled_index(g, n, 5) for g in range(n, 2 * n)]
        self.assertEqual(sorted(first), list(range(n)))
        self.assertEqual(sorted(second), list(range(n)))
        self.assertNotEqual(first, second)


if __name__ == "__main__":
    unittest.main()
