"""Launches a training script as Strata workers.

    python -m strata.run --scheduler HOST:PORT [--nproc N] [--workers W]
        [--tls_cert F --tls_key F --tls_ca F] [--bf16] train.py [args...]

Each worker process gets the job's settings in the environment
(strata.env): STRATA_SCHEDULER, STRATA_WORKERS (the workers a job waits
for; default: --nproc), STRATA_TLS_*, STRATA_BF16, and STRATA_LOCAL_RANK
(its index among the --nproc started here). With --nproc 1 the script runs
in this process (SIGTERM: it leaves the job after the step under way;
Ctrl-C: KeyboardInterrupt). With more, each worker runs in a session of
its own, and a SIGTERM or SIGINT (Ctrl-C) to the launcher reaches every
worker as SIGTERM; the exit code is the first failure's, else 0.
"""

import argparse
import os
import runpy
import signal
import subprocess
import sys


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m strata.run",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--scheduler", default=os.environ.get("STRATA_SCHEDULER"),
                   help="the scheduler's host:port")
    p.add_argument("--nproc", type=int, default=1,
                   help="worker processes to start on this host")
    p.add_argument("--workers", type=int, default=None,
                   help="workers the job waits for (default: --nproc)")
    p.add_argument("--tls_cert")
    p.add_argument("--tls_key")
    p.add_argument("--tls_ca")
    p.add_argument("--bf16", action="store_true",
                   help="push gradients and pull weights as bf16")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if not a.scheduler:
        p.error("--scheduler (or STRATA_SCHEDULER) is required")
    if a.nproc < 1:
        p.error("--nproc must be >= 1")
    return a


def _environment(a):
    e = {"STRATA_SCHEDULER": a.scheduler,
         "STRATA_WORKERS": str(a.workers or a.nproc)}
    for key in ("tls_cert", "tls_key", "tls_ca"):
        if getattr(a, key):
            e["STRATA_" + key.upper()] = os.path.abspath(getattr(a, key))
    if a.bf16:
        e["STRATA_BF16"] = "1"
    return e


def main(argv=None):
    a = _parse(sys.argv[1:] if argv is None else argv)
    os.environ.update(_environment(a))
    if a.nproc == 1:
        os.environ["STRATA_LOCAL_RANK"] = "0"
        sys.argv = [a.script] + a.args
        runpy.run_path(a.script, run_name="__main__")
        return 0
    procs = []
    for rank in range(a.nproc):
        env = dict(os.environ, STRATA_LOCAL_RANK=str(rank))
        # A session of its own: a terminal's Ctrl-C reaches the launcher
        # only, which turns it into SIGTERM (leave after the step).
        procs.append(subprocess.Popen(
            [sys.executable, a.script] + a.args, env=env,
            start_new_session=True))

    def forward(signum, _):
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [proc.wait() for proc in procs]
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
