"""Starts a scheduler and two servers on this machine (strata.local), then
two PyTorch workers of nanogpt.py through `python -m strata.run`, and stops
everything at the end. Arguments after `--` go to nanogpt.py:

    PYTHONPATH=build/python /usr/bin/python3 examples/pytorch/train_local.py \
        --consistency ssp:2 -- --steps 100
"""

import argparse
import os
import subprocess
import sys

import strata.local


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--consistency", default="bsp")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    a = p.parse_args()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "nanogpt.py")
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    with strata.local.Cluster(servers=a.servers,
                              consistency=a.consistency) as cluster:
        print(f"scheduler at {cluster.scheduler}; logs in {cluster.dir}",
              flush=True)
        code = subprocess.call(
            [sys.executable, "-m", "strata.run", "--scheduler",
             cluster.scheduler, "--nproc", str(a.workers), script] + rest)
        ledger = cluster.run("ledger", "--scheduler", cluster.scheduler,
                             "--check", check=False)
        print(ledger.stdout.strip())
    return code or ledger.returncode


if __name__ == "__main__":
    sys.exit(main())
