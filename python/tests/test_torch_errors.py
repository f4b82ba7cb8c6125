"""DistributedOptimizer refuses models it cannot train, before it joins."""

import unittest

import torch

import strata.torch as st


class Refusals(unittest.TestCase):
    # No scheduler is running: each refusal comes before any connection.
    def test_float64_parameters_are_refused(self):
        model = torch.nn.Linear(3, 2).double()
        with self.assertRaisesRegex(TypeError, "float64.*float32"):
            st.DistributedOptimizer(model.named_parameters(),
                                    scheduler="127.0.0.1:1")

    def test_parameters_off_the_cpu_are_refused(self):
        model = torch.nn.Linear(3, 2, device="meta")
        with self.assertRaisesRegex(ValueError, "meta"):
            st.DistributedOptimizer(model.named_parameters(),
                                    scheduler="127.0.0.1:1")

    def test_groups_naming_unknown_parameters_are_refused(self):
        model = torch.nn.Linear(3, 2)
        with self.assertRaisesRegex(KeyError, "nope"):
            st.DistributedOptimizer(
                model.named_parameters(), scheduler="127.0.0.1:1",
                groups=[{"params": ["nope"], "weight_decay": 0.0}])

    def test_unknown_optimizers_are_refused(self):
        model = torch.nn.Linear(3, 2)
        with self.assertRaisesRegex(ValueError, "lion"):
            st.DistributedOptimizer(model.named_parameters(),
                                    scheduler="127.0.0.1:1",
                                    optimizer="lion")

    def test_an_expert_without_parameters_is_refused(self):
        model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
        with self.assertRaisesRegex(ValueError, "expert 1 \\(ReLU\\)"):
            st.DistributedOptimizer(model.named_parameters(),
                                    scheduler="127.0.0.1:1",
                                    experts=[model[0], model[1]])

    def test_an_unknown_async_lr_is_refused(self):
        model = torch.nn.Linear(3, 2)
        with self.assertRaisesRegex(ValueError, "async_lr.*'half'"):
            st.DistributedOptimizer(model.named_parameters(),
                                    scheduler="127.0.0.1:1", async_lr="half")

    def test_a_missing_scheduler_address_is_refused(self):
        model = torch.nn.Linear(3, 2)
        with self.assertRaisesRegex(ValueError, "STRATA_SCHEDULER"):
            st.DistributedOptimizer(model.named_parameters(),
                                    scheduler="")

    def test_an_absent_scheduler_times_out(self):
        model = torch.nn.Linear(3, 2)
        with self.assertRaises((TimeoutError, st._strata.StrataError)):
            st.DistributedOptimizer(model.named_parameters(),
                                    scheduler="127.0.0.1:1", timeout=1)


if __name__ == "__main__":
    unittest.main()
