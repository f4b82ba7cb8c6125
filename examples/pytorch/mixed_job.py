"""One job, two kinds of worker: a C++ `strata worker` and a Python
worker (strata_gpt_worker.py, Strata's GPT in PyTorch) train one GPT
through two servers on this machine, each computing its share of every
step. Arguments after `--` go to both workers (the model's and the job's
flags):

    PYTHONPATH=build/python /usr/bin/python3 examples/pytorch/mixed_job.py \\
        -- --layers 2 --heads 2 --width 64 --context 64 --steps 50
"""

import os
import subprocess
import sys

import strata.local


def main():
    rest = sys.argv[1:]
    rest = rest[1:] if rest[:1] == ["--"] else rest
    here = os.path.dirname(os.path.abspath(__file__))
    with strata.local.Cluster(servers=2, consistency="bsp") as cluster:
        print(f"scheduler at {cluster.scheduler}", flush=True)
        cpp = subprocess.Popen(
            [cluster.binary, "worker", "--scheduler", cluster.scheduler,
             "--workers", "2"] + rest)
        env = dict(os.environ, STRATA_SCHEDULER=cluster.scheduler,
                   STRATA_WORKERS="2")
        py = subprocess.Popen(
            [sys.executable, os.path.join(here, "strata_gpt_worker.py")]
            + rest, env=env)
        codes = [cpp.wait(), py.wait()]
        ledger = cluster.run("ledger", "--scheduler", cluster.scheduler,
                             "--check", check=False)
        print(ledger.stdout.strip())
    return next((c for c in codes if c), ledger.returncode)


if __name__ == "__main__":
    sys.exit(main())
