"""The Python client on a cluster with mutual TLS on every channel: a
worker's certificate gets in, another role's is refused before anything
is sent, and plaintext gets no answer."""

import os
import unittest

import numpy as np

import harness
import strata
import strata.local


class Tls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = strata.local.Cluster(servers=2, consistency="asp",
                                           tls=True)
        cls.cluster.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.__exit__(None, None, None)

    def test_a_worker_certificate_pushes_and_pulls(self):
        c = strata.Client(scheduler=self.cluster.scheduler,
                          **self.cluster.tls_files("worker"))
        c.register([strata.model.tensor("tls.w", (8,), "main",
                                        {"kind": "constant", "scale": 2})],
                   [strata.model.group("main", optimizer="sgd", lr=1.0)])
        w = np.empty(8, np.float32)
        c.push("tls.w", np.ones(8, np.float32), step=0).wait()
        c.pull("tls.w", w, min_version=1).wait()
        np.testing.assert_array_equal(w, 1.0)

    def test_another_roles_certificate_is_refused(self):
        with self.assertRaisesRegex(ValueError, "server's certificate"):
            strata.Client(scheduler=self.cluster.scheduler,
                          **self.cluster.tls_files("server"))

    def test_plaintext_gets_no_answer(self):
        with self.assertRaises((TimeoutError, strata.StrataError)):
            strata.Client(scheduler=self.cluster.scheduler, timeout=2)



class TlsTorch(unittest.TestCase):
    # A cluster of its own: the ledger counts a push applied once every
    # chunk of a server has it, so a server must hold the job's model only
    # (Tls registers other tensors on its servers).
    def test_torch_workers_train_from_the_environment(self):
        d = harness.fresh_dir(self, "tls")
        log = os.path.join(d, "w.log")
        with strata.local.Cluster(servers=2, consistency="asp",
                                  tls=True) as cluster:
            files = cluster.tls_files("worker")
            proc = harness.start_worker(
                cluster, log, 1, "--steps", 5, "--batch", 4,
                env={"STRATA_TLS_" + k[4:].upper(): v
                     for k, v in files.items()})
            self.assertEqual(proc.wait(timeout=120), 0, harness.output(log))
            ledger = cluster.run("ledger", "--scheduler", cluster.scheduler,
                                 "--check", check=False)
        self.assertEqual(sorted(harness.read_log(log)), list(range(5)))
        self.assertEqual(ledger.returncode, 0, ledger.stdout + ledger.stderr)


if __name__ == "__main__":
    unittest.main()
