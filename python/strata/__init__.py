"""Strata's Python client: train PyTorch models through Strata's servers.

The servers hold the weights and run the optimizer; a Python worker pulls
the weights, computes gradients and pushes them. `strata.torch` plugs this
into a PyTorch training loop (DistributedOptimizer, ElasticSampler);
`Client` and `Session` are the layers under it.
"""

from strata._strata import (  # noqa: F401  (the C++ module)
    Client,
    Handle,
    Session,
    Step,
    StrataError,
    TokenDataset,
    shuffled_index,
)
from strata import model  # noqa: F401
from strata.env import connect_options  # noqa: F401

__all__ = [
    "Client",
    "Handle",
    "Session",
    "Step",
    "StrataError",
    "TokenDataset",
    "connect_options",
    "shuffled_index",
]
