#!/usr/bin/env bash
# The containers test (ctest -L containers; also run directly): builds the
# image from this checkout with Podman, brings docker/compose.yaml up on
# host networking (docker/compose.host.yaml, 127.0.0.1 ports), waits for
# training steps, kills a worker container, scales the workers up by one,
# and checks that training goes on and the new worker trains.
#
# Compose is Docker Compose (docker-compose, from Debian) talking to
# Podman's Docker-compatible API on a socket of this test's own: the same
# compose.yaml a user runs with Docker. (podman-compose 1.0.3 cannot run
# host networking: it adds a network alias that Podman refuses there.)
#
# Exit 77 (ctest: skipped) with the reason where podman, docker-compose or
# a base image cannot be had; docs/OPERATIONS.md ("Containers with
# Podman") has the setup.
# The first image build compiles Strata in the container (~15 min on 2
# cores); later ones reuse its layers and compiler cache.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}"
skip() { echo "SKIPPED: $*" >&2; exit 77; }
for tool in podman docker-compose; do
  command -v "${tool}" > /dev/null ||
    skip "${tool} is missing (apt-get install podman docker-compose runc mmdebstrap)"
done
# This machine's cgroup setup needs runc and no ulimits (docs/OPERATIONS.md,
# "Containers with Podman").
if [ -z "${CONTAINERS_CONF:-}" ]; then
  export CONTAINERS_CONF="${TMPDIR:-/tmp}/strata-containers.conf"
  printf '[containers]\ndefault_ulimits = []\npids_limit = 0\n[engine]\nruntime = "runc"\n' \
    > "${CONTAINERS_CONF}"
fi
base=docker.io/library/debian:bookworm-slim
if ! podman image exists "${base}"; then
  command -v mmdebstrap > /dev/null ||
    skip "no ${base} image and no mmdebstrap to make one (apt-get install mmdebstrap)"
  echo "making ${base} with mmdebstrap (about 100 s)" >&2
  tar="$(mktemp --suffix=.tar)"
  mmdebstrap --variant=minbase --include=ca-certificates bookworm "${tar}" ||
    skip "mmdebstrap could not make ${base}"
  podman import "${tar}" "${base}" > /dev/null
  rm -f "${tar}"
fi
image=localhost/strata:containers-test
podman build --pull=never --network host --format docker \
  -f docker/Dockerfile --target runtime -t "${image}" . >&2

# Host networking: every port on 127.0.0.1, picked apart from other runs.
base_port=$((20000 + ($$ % 400) * 10))
export STRATA_IMAGE="${image}" STRATA_STEPS=1000000
export STRATA_SCHEDULER="127.0.0.1:${base_port}"
export STRATA_SCHEDULER_LISTEN="${STRATA_SCHEDULER}"
export STRATA_SERVER0="127.0.0.1:$((base_port + 1))"
export STRATA_SERVER0_LISTEN="${STRATA_SERVER0}"
export STRATA_SERVER1="127.0.0.1:$((base_port + 2))"
export STRATA_SERVER1_LISTEN="${STRATA_SERVER1}"
export STRATA_SCHEDULER_METRICS_PORT=$((base_port + 3))
export STRATA_SERVER0_METRICS_PORT=$((base_port + 4))
export STRATA_SERVER1_METRICS_PORT=$((base_port + 5))
export STRATA_WORKER_LISTEN=127.0.0.1:0 STRATA_WORKER_METRICS_PORT=0
project="strata-ct-$$"
work="$(mktemp -d)"
# Mutual TLS with certificates made by the image itself. Test only: the
# keys are made readable by the image's user (uid 10001, another uid on
# the host); they live in this run's temporary folder.
mkdir "${work}/certs"
podman run --rm --user 0 --network none -v "${work}/certs:/out" \
  --entrypoint strata "${image}" certs --out /out >&2
chmod a+r "${work}"/certs/*.key
export STRATA_CERTS="${work}/certs"
podman system service --time=0 "unix://${work}/podman.sock" 2> "${work}/service.log" &
service=$!
export DOCKER_HOST="unix://${work}/podman.sock"
compose=(docker-compose -p "${project}" -f docker/compose.yaml -f docker/compose.host.yaml)
cleanup() {
  "${compose[@]}" down -v > /dev/null 2>&1 || true
  kill "${service}" 2> /dev/null || true
  rm -rf "${work}"
}
trap cleanup EXIT
for _ in $(seq 50); do [ -S "${work}/podman.sock" ] && break; sleep 0.2; done

status() {
  podman exec "${project}_scheduler_1" strata status --scheduler "${STRATA_SCHEDULER}" 2>&1
}
# "id step" for each SERVING worker in the status.
workers() {
  status | sed -n 's/^  worker \([0-9]*\)  SERVING  step \([0-9]*\) .*/\1 \2/p'
}
# Waits up to $2 seconds for `$1` (a shell test of the workers list in
# $w) to hold; fails with the last status otherwise.
wait_for() {
  local what="$1" deadline=$((SECONDS + $2))
  while [ "${SECONDS}" -lt "${deadline}" ]; do
    w="$(workers || true)"
    if eval "${what}"; then return 0; fi
    sleep 2
  done
  echo "FAILED waiting for: ${what}" >&2
  status >&2 || true
  for c in $(podman ps -a --format '{{.Names}}' | grep "^${project}_"); do
    echo "--- ${c}" >&2
    podman logs --tail 20 "${c}" >&2 || true
  done
  exit 1
}
max_step() { echo "${w}" | awk 'BEGIN{m=-1} {if ($2>m) m=$2} END{print m}'; }

"${compose[@]}" up -d --scale worker=2 >&2
wait_for '[ "$(echo "${w}" | grep -c .)" -eq 2 ] && [ "$(max_step)" -ge 5 ]' 300
echo "two workers train: $(echo "${w}" | tr '\n' ' ')" >&2
ids_before="$(echo "${w}" | cut -d' ' -f1 | sort)"

# Kill one worker container: the other goes on (after the dead one's lease
# runs out and its step is redone).
victim="$(podman ps --format '{{.Names}}' | grep "^${project}_worker_" | head -1)"
podman kill -s KILL "${victim}" > /dev/null
step=$(max_step)
wait_for '[ "$(max_step)" -ge $((step + 10)) ]' 120
echo "after killing ${victim}: training goes on ($(echo "${w}" | tr '\n' ' '))" >&2

# Scale up by one: a worker with an id not seen before joins and trains.
"${compose[@]}" up -d --scale worker=3 >&2
new_worker_trains() {
  local id
  for id in $(echo "${w}" | cut -d' ' -f1); do
    if ! echo "${ids_before}" | grep -qx "${id}"; then
      [ "$(echo "${w}" | awk -v i="${id}" '$1==i {print $2}')" -gt 0 ] && return 0
    fi
  done
  return 1
}
wait_for 'new_worker_trains' 180
echo "after scaling up: $(echo "${w}" | tr '\n' ' ')" >&2
# The image's HEALTHCHECK answers for the scheduler.
podman healthcheck run "${project}_scheduler_1" > /dev/null ||
  { echo "FAILED: the scheduler's health check" >&2; exit 1; }
echo "containers test: passed" >&2
