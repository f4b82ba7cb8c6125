#!/usr/bin/env python3
"""Checks that docker/k8s and docker/compose.yaml agree with each other and
with what Strata's roles need; prints each problem and exits 1 if any.

Usage: check_manifests.py K8S_DIR COMPOSE_FILE
"""
import pathlib
import re
import sys

import yaml


def flag(args, name):
    """The value of --name=value (or --name value) in args, or None."""
    text = " ".join(args)
    m = re.search(r"--%s[= ](\S+)" % re.escape(name), text)
    return m.group(1) if m else None


def container_args(container):
    return list(container.get("command", [])) + list(container.get("args", []))


def check_k8s(k8s_dir, problems):
    docs = []
    for path in sorted(pathlib.Path(k8s_dir).glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    def workload(component):
        for kind in ("Deployment", "StatefulSet"):
            for d in by_kind.get(kind, []):
                labels = d["spec"]["template"]["metadata"]["labels"]
                if labels.get("app.kubernetes.io/component") == component:
                    return d
        problems.append("no workload for the %s" % component)
        return None

    scheduler, servers, workers = (workload(c)
                                   for c in ("scheduler", "server", "worker"))
    if not (scheduler and servers and workers):
        return
    if scheduler["kind"] != "Deployment" or servers["kind"] != "StatefulSet":
        problems.append("the scheduler must be a Deployment, the servers a "
                        "StatefulSet")
    shards = flag(container_args(
        scheduler["spec"]["template"]["spec"]["containers"][0]), "num_shards")
    if str(servers["spec"]["replicas"]) != shards:
        problems.append("scheduler --num_shards=%s but %s server replicas" %
                        (shards, servers["spec"]["replicas"]))
    if not servers["spec"].get("volumeClaimTemplates"):
        problems.append("the servers keep no volume for their snapshots")
    services = {s["metadata"]["name"] for s in by_kind.get("Service", [])}
    if servers["spec"]["serviceName"] not in services:
        problems.append("the servers' serviceName names no Service")
    for w in (scheduler, servers, workers):
        name = w["metadata"]["name"]
        pod = w["spec"]["template"]["spec"]
        c = pod["containers"][0]
        args = container_args(c)
        component = w["spec"]["template"]["metadata"]["labels"][
            "app.kubernetes.io/component"]
        secrets = [v["secret"]["secretName"] for v in pod.get("volumes", [])
                   if "secret" in v]
        if secrets != ["strata-tls-%s" % component]:
            problems.append("%s mounts Secrets %s, not only strata-tls-%s" %
                            (name, secrets, component))
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        for var in ("STRATA_TLS_CERT", "STRATA_TLS_KEY", "STRATA_TLS_CA"):
            if not (env.get(var) or "").startswith("/etc/strata/tls/"):
                problems.append("%s does not set %s" % (name, var))
        if not pod.get("securityContext", {}).get("runAsNonRoot"):
            problems.append("%s may run as root" % name)
        # Kubernetes' own gRPC probes cannot present a client certificate:
        # the probes run `strata health` with the role's own, on the pod's
        # loopback (its advertised name may not resolve before it is ready).
        listen = flag(args, "listen") or ""
        for probe in ("readinessProbe", "livenessProbe"):
            command = c.get(probe, {}).get("exec", {}).get("command", [])
            want = ["strata", "health", "--address",
                    "127.0.0.1:" + listen.rsplit(":", 1)[-1]]
            if command[:4] != want:
                problems.append("%s: %s is not `strata health` on its "
                                "--listen port (%s)" % (name, probe, listen))
            timeout = c.get(probe, {}).get("timeoutSeconds", 1)
            if "--timeout_s" in command and float(
                    command[command.index("--timeout_s") + 1]) >= timeout:
                problems.append("%s: %s gives up (timeoutSeconds %s) before "
                                "strata health does" % (name, probe, timeout))
        if flag(args, "scheduler") not in (None, "strata-scheduler:7070"):
            problems.append("%s dials %s, not the scheduler's Service" %
                            (name, flag(args, "scheduler")))
    pre_stop = workers["spec"]["template"]["spec"]["containers"][0].get(
        "lifecycle", {}).get("preStop")
    if not pre_stop or "kill -TERM 1" not in str(pre_stop):
        problems.append("the workers have no preStop that makes them leave")


def check_compose(path, problems):
    compose = yaml.safe_load(pathlib.Path(path).read_text())
    services = compose["services"]
    for name in ("scheduler", "server-0", "server-1", "worker"):
        if name not in services:
            problems.append("compose: no service %s" % name)
            return
    shards = flag(services["scheduler"]["command"], "num_shards")
    servers = [n for n in services if n.startswith("server-")]
    if str(len(servers)) != shards:
        problems.append("compose: --num_shards=%s but %d servers" %
                        (shards, len(servers)))
    for n in servers:
        shard = flag(services[n]["command"], "shard")
        if n != "server-%s" % shard:
            problems.append("compose: %s serves shard %s" % (n, shard))
        if not any(v.endswith(":/var/lib/strata/server")
                   for v in services[n]["volumes"]):
            problems.append("compose: %s keeps no snapshot volume" % n)
    for n, s in services.items():
        text = " ".join(s.get("command", []))
        if "--address_file=/tmp/strata.address" not in text:
            problems.append("compose: %s writes no address for the image's "
                            "HEALTHCHECK" % n)
        role = "server" if n.startswith("server-") else n
        mounted = sorted(v.split(":/etc/strata/tls/")[0].rsplit("/", 1)[-1]
                         for v in s.get("volumes", [])
                         if ":/etc/strata/tls/" in v)
        if mounted != sorted(["ca.pem", role + ".pem", role + ".key"]):
            problems.append("compose: %s mounts %s, not ca.pem and only its "
                            "own role's certificate and key" % (n, mounted))


def main():
    problems = []
    check_k8s(sys.argv[1], problems)
    check_compose(sys.argv[2], problems)
    for p in problems:
        print("check_manifests: " + p, file=sys.stderr)
    if not problems:
        print("check_manifests: the manifests agree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
