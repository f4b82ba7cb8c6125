#!/usr/bin/env bash
# CPU training throughput of Strata's GPT (forward, backward, local AdamW),
# and of PyTorch on the same shapes when python3 can import torch.
#
# Run from the repository root of a clone: bench/cpu_train.sh [bench flags]
# (e.g. --steps 10). Builds into build/ (configuring it if needed; override
# with BUILD_DIR). Prints
#   cpu_tokens_per_s <config> <x>                 pure compute, one process
#   cpu_tokens_per_s_with_servers <config> <z>    `strata worker` + 2 servers
#   sync_overhead <config> <1 - z/x>
# and, with torch,
#   torch_tokens_per_s <config> <y>
#   ratio_to_torch <config> <x/y>
# Set WITH_SERVERS=0 to skip the cluster runs; WORKER_FLAGS adds flags to
# the workers there (e.g. "--shm false" for payloads in gRPC messages),
# SERVER_FLAGS to the servers (e.g. "--write_behind false" with TIER),
# SCHEDULER_FLAGS to the scheduler (e.g. "--consistency asp"; not with
# ALLREDUCE, whose runs need BSP).
# TIER=4 also runs each cluster shape with servers whose --ram_budget is a
# quarter of their share of the state (weights and AdamW moments, 12 bytes
# per parameter), the rest spilled to disk under TIER_DIR (default
# /var/tmp), and prints
#   cpu_tokens_per_s_with_tier <config> <t>
#   tier_ratio_to_unbounded <config> <t/z>      (target >= 0.7 for 124M)
# REPLICAS=2 also runs each cluster shape with a primary and a backup per
# slot (--replicas 2) and prints
#   cpu_tokens_per_s_with_replicas <config> <r>
#   replicas_ratio_to_one <config> <r/z>         (target >= 0.8)
# MICRO_BATCHES=N makes each cluster step N micro-batches of the shape's
# batch (N times its tokens per step, one push per step; the configs named
# <config>_xN): the tier's cost per step is about fixed, so its ratio grows
# with the tokens per step (docs/BENCHMARKS.md).
# ALLREDUCE=1 also runs each cluster shape with 2 workers, once with
# --sync ps and once with --sync allreduce, and prints
#   cpu_tokens_per_s_2workers_ps <config> <p>
#   cpu_tokens_per_s_2workers_allreduce <config> <a>
#   allreduce_ratio_to_ps <config> <a/p>
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
source bench/common.sh

if [[ ! -f "${build}/build.ninja" ]]; then
  cmake -S . -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
fi
ninja -C "${build}" cpu_train_bench strata >&2

echo "load before: $(uptime)" >&2
ours="$("${build}/bench/cpu_train_bench" "$@")"
echo "${ours}"

# Debian's PyTorch lives in the system python (python3-torch); prefer it
# over another python3 earlier on PATH.
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
if "${py}" -c 'import torch' 2>/dev/null; then
  theirs="$("${py}" bench/torch_ref.py)"
  echo "${theirs}"
  join_figures cpu_tokens_per_s "${ours}" "${theirs}" ratio_to_torch "x / y"
else
  echo "${py} cannot import torch (Debian: apt-get install python3-torch): skipping the PyTorch reference" >&2
fi
if [[ "${WITH_SERVERS:-1}" != 0 ]]; then
  servers="$(with_servers L4_C256_H4_B8_T256 4 4 256 256 8; with_servers L12_C768_H12_B4_T64 12 12 768 64 4)"
  echo "${servers}"
  join_figures cpu_tokens_per_s "${ours}" "${servers}" sync_overhead "1 - y / x"
  if [[ -n "${TIER:-}" ]]; then
    tiered="$(with_servers L4_C256_H4_B8_T256 4 4 256 256 8 "${TIER}"; with_servers L12_C768_H12_B4_T64 12 12 768 64 4 "${TIER}")"
    echo "${tiered}"
    join_figures cpu_tokens_per_s_with_tier "${tiered}" "${servers}" tier_ratio_to_unbounded "x / y"
  fi
  if [[ -n "${REPLICAS:-}" ]]; then
    replicated="$(REPLICATE="${REPLICAS}" with_servers L4_C256_H4_B8_T256 4 4 256 256 8
      REPLICATE="${REPLICAS}" with_servers L12_C768_H12_B4_T64 12 12 768 64 4)"
    echo "${replicated}"
    join_figures cpu_tokens_per_s_with_replicas "${replicated}" "${servers}" replicas_ratio_to_one "x / y"
  fi
  if [[ -n "${ALLREDUCE:-}" ]]; then
    two() {  # sync
      WORKERS=2 FIGURE="cpu_tokens_per_s_2workers_$1" WORKER_FLAGS="${WORKER_FLAGS:-} --sync $1" \
        with_servers L4_C256_H4_B8_T256 4 4 256 256 8
      WORKERS=2 FIGURE="cpu_tokens_per_s_2workers_$1" WORKER_FLAGS="${WORKER_FLAGS:-} --sync $1" \
        with_servers L12_C768_H12_B4_T64 12 12 768 64 4
    }
    ps="$(two ps)"; echo "${ps}"
    ar="$(two allreduce)"; echo "${ar}"
    join_figures cpu_tokens_per_s_2workers_allreduce "${ar}" "${ps}" allreduce_ratio_to_ps "x / y"
  fi
fi
echo "load after: $(uptime)" >&2
