"""A scheduler and parameter servers on this machine, for tests, examples
and notebooks: the processes `strata local` starts, without its workers.

    with strata.local.Cluster(servers=2, consistency="bsp") as c:
        ... workers connect to c.scheduler ...

The `strata` binary is $STRATA_BIN, else `strata` on PATH, else the build
tree's (build/cli/strata beside this checkout).
"""

import os
import shutil
import subprocess
import tempfile
import time


def strata_binary():
    if os.environ.get("STRATA_BIN"):
        return os.environ["STRATA_BIN"]
    on_path = shutil.which("strata")
    if on_path:
        return on_path
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (os.path.join(here, "..", ".."),
                 os.path.join(here, "..", "..", "..")):
        candidate = os.path.join(root, "build", "cli", "strata")
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    raise FileNotFoundError(
        "no strata binary: set STRATA_BIN or put strata on PATH")


def _wait_for_file(path, proc, log, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                text = f.read().strip()
            if text:
                return text
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[1]} exited {proc.returncode}: "
                               f"{_tail(log)}")
        time.sleep(0.02)
    raise TimeoutError(f"{proc.args[1]} did not start: {_tail(log)}")


def _tail(path, lines=20):
    try:
        with open(path) as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


class Cluster:
    """A scheduler and `servers` servers on loopback, stopped on exit.
    `dir`: their working directory (default: a new temporary one, removed
    on exit). With `tls`, every channel is mutual TLS with certificates
    `strata certs` makes in dir/certs; `tls_files(role)` gives a role's
    keyword arguments (tls_cert, tls_key, tls_ca) for Client, Session and
    DistributedOptimizer."""

    def __init__(self, servers=2, consistency="bsp", dir=None, lease_ms=None,
                 server_args=(), strata=None, tls=False):
        self.binary = strata or strata_binary()
        self._own_dir = dir is None
        self.dir = dir or tempfile.mkdtemp(prefix="strata-cluster-")
        self.servers = servers
        self.consistency = consistency
        self.lease_ms = lease_ms
        self.server_args = list(server_args)
        self.procs = {}
        self.scheduler = None
        self.tls = tls

    def tls_files(self, role):
        """{tls_cert, tls_key, tls_ca} of `role` (worker, client, server,
        scheduler); {} without TLS."""
        if not self.tls:
            return {}
        certs = os.path.join(self.dir, "certs")
        return {"tls_cert": os.path.join(certs, role + ".pem"),
                "tls_key": os.path.join(certs, role + ".key"),
                "tls_ca": os.path.join(certs, "ca.pem")}

    def _tls_flags(self, role):
        return [x for key, path in self.tls_files(role).items()
                for x in ("--" + key, path)]

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_):
        self.stop()

    def _spawn(self, name, args):
        log = os.path.join(self.dir, name + ".log")
        address_file = os.path.join(self.dir, name + ".address")
        if os.path.exists(address_file):
            os.remove(address_file)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [self.binary] + args + ["--address_file", address_file],
                stdout=out, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return _wait_for_file(address_file, proc, log, 60)

    def start(self):
        if self.tls:
            subprocess.run([self.binary, "certs", "--out",
                            os.path.join(self.dir, "certs")], check=True,
                           capture_output=True)
        args = ["scheduler", "--listen", "127.0.0.1:0", "--num_shards",
                str(self.servers), "--consistency", self.consistency,
                "--data_dir", os.path.join(self.dir, "scheduler")]
        if self.lease_ms:
            args += ["--lease_ms", str(self.lease_ms)]
        args += self._tls_flags("scheduler")
        self.scheduler = self._spawn("scheduler", args)
        for i in range(self.servers):
            self.start_server(i)

    def start_server(self, shard):
        """Starts (or restarts) the server of slot `shard`."""
        return self._spawn(f"server{shard}", [
            "server", "--scheduler", self.scheduler, "--listen",
            "127.0.0.1:0", "--shard", str(shard), "--data_dir",
            os.path.join(self.dir, f"server{shard}")] + self.server_args
            + self._tls_flags("server"))

    def run(self, *args, check=True):
        """Runs `strata <args>` (a tool such as `ledger --check`, with the
        client's TLS files when the cluster has TLS); its CompletedProcess,
        output as text."""
        return subprocess.run(
            [self.binary] + list(args) + self._tls_flags("client"),
            check=check, capture_output=True, text=True, timeout=120)

    def log(self, name):
        return _tail(os.path.join(self.dir, name + ".log"), 1000)

    def stop(self):
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = {}
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
