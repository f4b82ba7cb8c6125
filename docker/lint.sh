#!/usr/bin/env bash
# Checks docker/'s YAML without a cluster: yamllint on every file; the
# Kubernetes manifests build with `kubectl kustomize` (where kubectl is
# installed; `kubectl create --dry-run=client` needs an API server) and
# agree with each other (docker/check_manifests.py). Exit 0 when all pass.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}"
command -v yamllint > /dev/null || {
  echo "yamllint is missing: bash scripts/install-deps.sh installs it" >&2
  exit 1
}
yamllint --strict -c .yamllint docker/
if command -v kubectl > /dev/null; then
  kubectl kustomize docker/k8s > /dev/null
  echo "kubectl kustomize docker/k8s: ok"
else
  echo "kubectl not installed: skipping kubectl kustomize (the other checks ran)"
fi
python3 docker/check_manifests.py docker/k8s docker/compose.yaml
