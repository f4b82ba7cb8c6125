"""Connection settings from keywords or the environment.

A worker started by `python -m strata.run` (or by hand) finds its job in
these variables; a keyword given to the client overrides its variable:

  STRATA_SCHEDULER    the scheduler's host:port
  STRATA_WORKERS      wait until this many workers are live, then start
  STRATA_TLS_CERT, STRATA_TLS_KEY, STRATA_TLS_CA
                      mutual TLS files (a worker's, from `strata certs`)
  STRATA_BF16         "1": gradients pushed and weights pulled as bf16
"""

import os

_VARIABLES = {
    "scheduler": "STRATA_SCHEDULER",
    "tls_cert": "STRATA_TLS_CERT",
    "tls_key": "STRATA_TLS_KEY",
    "tls_ca": "STRATA_TLS_CA",
}


def connect_options(scheduler=None, tls_cert=None, tls_key=None, tls_ca=None,
                    bf16=None, shared_memory=True, timeout=60.0):
    """The keyword arguments of Client and Session for these settings."""
    given = {"scheduler": scheduler, "tls_cert": tls_cert,
             "tls_key": tls_key, "tls_ca": tls_ca}
    out = {}
    for key, value in given.items():
        out[key] = value if value is not None else os.environ.get(
            _VARIABLES[key], "")
    if not out["scheduler"]:
        raise ValueError(
            "no scheduler address: pass scheduler='host:port' or set "
            "STRATA_SCHEDULER (python -m strata.run does)")
    if bf16 is None:
        bf16 = os.environ.get("STRATA_BF16", "0") not in ("", "0")
    dtype = "bf16" if bf16 else "f32"
    out.update(push_dtype=dtype, pull_dtype=dtype,
               shared_memory=shared_memory, timeout=float(timeout))
    return out


def min_workers(workers=None):
    """How many workers a job waits for (STRATA_WORKERS, default 1)."""
    if workers is not None:
        return int(workers)
    return int(os.environ.get("STRATA_WORKERS", "1"))
