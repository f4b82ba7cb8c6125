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
# The same shapes trained by one `strata worker` through two servers on
# loopback (BSP, AdamW on the servers, the default settings: gradients
# clipped to norm 1 with pushes streamed during backward, payloads through
# shared memory).
with_servers() {  # name layers heads width context batch [state ratio]
  local name=$1 dir pids=() server_flags=() figure=${FIGURE:-cpu_tokens_per_s_with_servers}
  local workers=${WORKERS:-1} micro=${MICRO_BATCHES:-1} batch
  batch=$(( $6 * micro ))
  [[ "${micro}" == 1 ]] || name="${name}_x${micro}"
  dir=$(mktemp -d "${TIER_DIR:-/var/tmp}/strata-cpu-train-XXXXXX")
  "${build}/cli/strata" scheduler --listen 127.0.0.1:0 --num_shards 2 \
    ${SCHEDULER_FLAGS:-} --address_file "${dir}/addr" 2>"${dir}/scheduler.log" & pids+=($!)
  for _ in $(seq 100); do [[ -s "${dir}/addr" ]] && break; sleep 0.1; done
  local addr; addr=$(cat "${dir}/addr")
  if [[ -n "${7:-}" ]]; then
    # Each server's share of the state (12 bytes per parameter) / ratio.
    local params budget
    params=$(( 50257 * $4 + $5 * $4 + $2 * (12 * $4 * $4 + 13 * $4) + 2 * $4 ))
    budget=$(( params * 12 / 2 / $7 ))
    server_flags=(--ram_budget "${budget}")
    figure=cpu_tokens_per_s_with_tier
  fi
  for s in 0 1; do
    "${build}/cli/strata" server --scheduler "${addr}" --shard $s \
      --data_dir "${dir}/server$s" "${server_flags[@]}" ${SERVER_FLAGS:-} 2>"${dir}/server$s.log" & pids+=($!)
  done
  local worker_args=(--scheduler "${addr}" --workers "${workers}" --layers "$2" --heads "$3" \
    --width "$4" --context "$5" --batch "${batch}" --micro_batches "${micro}" --vocab 50257 --steps 6 --eval_every 0 \
    --data /usr/share/common-licenses)
  for w in $(seq 2 "${workers}"); do
    "${build}/cli/strata" worker "${worker_args[@]}" ${WORKER_FLAGS:-} \
      --metrics "${dir}/metrics-$w.jsonl" 2>"${dir}/worker$w.log" & pids+=($!)
  done
  "${build}/cli/strata" worker "${worker_args[@]}" ${WORKER_FLAGS:-} \
    --metrics "${dir}/metrics.jsonl" 2>"${dir}/worker.log"
  # Steps 2..5 (after warm-up), from the elapsed time in the metrics.
  python3 - "${dir}/metrics.jsonl" "$name" "$(( $5 * batch ))" "$figure" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = [r["elapsed_s"] for r in rows]
tokens = int(sys.argv[3])
print("%s %s %.1f" % (sys.argv[4], sys.argv[2], tokens * (len(t) - 2) / (t[-1] - t[1])))
PY
  if [[ -n "${7:-}" ]]; then
    "${build}/cli/strata" status --scheduler "${addr}" 2>/dev/null | grep -o 'ram [^m]*MiB  spilled [^M]*MiB  hit rate [0-9.]*' >&2 || true
  fi
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "${dir}"
}
if [[ "${WITH_SERVERS:-1}" != 0 ]]; then
  servers="$(with_servers L4_C256_H4_B8_T256 4 4 256 256 8; with_servers L12_C768_H12_B4_T64 12 12 768 64 4)"
  echo "${servers}"
  join_figures cpu_tokens_per_s "${ours}" "${servers}" sync_overhead "1 - y / x"
  if [[ -n "${TIER:-}" ]]; then
    tiered="$(with_servers L4_C256_H4_B8_T256 4 4 256 256 8 "${TIER}"; with_servers L12_C768_H12_B4_T64 12 12 768 64 4 "${TIER}")"
    echo "${tiered}"
    join_figures cpu_tokens_per_s_with_tier "${tiered}" "${servers}" tier_ratio_to_unbounded "x / y"
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
