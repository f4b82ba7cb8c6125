#!/usr/bin/env bash
# Single-GPU training throughput and MFU of Strata's GPT (resident AdamW,
# bench/gpu_train_bench.cc), and of PyTorch on the same shapes and batches
# when python3 there imports torch with CUDA (bench/torch_gpu_ref.py).
#
#   bench/gpu_train.sh [gpu_train_bench flags]   e.g. --config gpt2_124M --batch 8,16
#
# Builds build-gpu/ (STRATA_CUDA=ON) unless GPU_TRAIN_BENCH names a built
# binary, or a runner command such as ".gpu-bundle/run gpu_train_bench" (the
# GPU machine has no Debian packages: see docs/BENCHMARKS.md). Prints
#   gpu_tokens_per_s <config> <x>     gpu_mfu <config> <m>
#   torch_gpu_tokens_per_s <config> <y>   ratio_to_torch_gpu <config> <x/y>
# Without a CUDA device it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
if [[ -z "${GPU_TRAIN_BENCH:-}" ]]; then
  build="${BUILD_DIR:-build-gpu}"
  if [[ ! -f "${build}/build.ninja" ]]; then
    cmake -S . -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSTRATA_CUDA=ON >&2
  fi
  ninja -C "${build}" gpu_train_bench >&2
  GPU_TRAIN_BENCH="${build}/bench/gpu_train_bench"
fi
read -r -a bench_cmd <<<"${GPU_TRAIN_BENCH}"
# THROUGH_SERVERS=only: the run through servers alone (below).
only="${THROUGH_SERVERS:-0}"
if [[ "${only}" != only ]]; then
  ours="$("${bench_cmd[@]}" "$@")"
  echo "${ours}"
  [[ -z "${ours}" ]] && exit 0  # no device
fi

# The same configuration and batches for PyTorch.
config=gpt2_124M batch=8,16,32 context=1024
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --config) config="${args[i + 1]}" ;;
    --batch) batch="${args[i + 1]}" ;;
    --context) context="${args[i + 1]}" ;;
  esac
done
bench_dir="$(dirname "$0")"
if [[ "${only}" == only ]]; then
  :
elif [[ "${config}" != all ]] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  theirs="$(python3 "${bench_dir}/torch_gpu_ref.py" --config "${config}" --batch "${batch}" --context "${context}")"
  echo "${theirs}"
  join_figures gpu_tokens_per_s "${ours}" "${theirs}" ratio_to_torch_gpu "x / y"
else
  echo "no CUDA-enabled torch (or --config all): skipping the PyTorch reference" >&2
fi

# THROUGH_SERVERS=1: the same model and batches trained by one
# `strata worker --device cuda` through two local `strata server`s (BSP,
# AdamW on the servers, the default sync settings), against the resident
# figures above:
#   gpu_tokens_per_s_through_servers <config> <z>
#   ratio_to_resident <config> <z/x>
# STRATA names the strata command (default: build-gpu's, or the bundle's
# runner with GPU_TRAIN_BENCH); WORKER_FLAGS adds worker flags (DEVICE=cpu
# tries the script without a GPU). THROUGH_SERVERS=only runs that alone
# (no resident run, no PyTorch, no ratio).
[[ "${only}" == 1 || "${only}" == only ]] || exit 0
if [[ -z "${STRATA:-}" ]]; then
  if [[ "${bench_cmd[0]}" == */run ]]; then STRATA="${bench_cmd[0]} strata"
  else STRATA="${build:-build-gpu}/cli/strata"; ninja -C "${build:-build-gpu}" strata >&2; fi
fi
read -r -a strata <<<"${STRATA}"
declare -A shapes=([gpt2_124M]="12 12 768" [gpt2_350M]="24 16 1024"
  [gpt2_774M]="36 20 1280" [gpt2_1558M]="48 25 1600")
read -r layers heads width <<<"${shapes[${config}]}"
through=""
for b in ${batch//,/ }; do
  dir=$(mktemp -d /tmp/strata-gpu-servers-XXXXXX)
  pids=()
  "${strata[@]}" scheduler --listen 127.0.0.1:0 --num_shards 2 \
    --address_file "${dir}/addr" 2>"${dir}/scheduler.log" & pids+=($!)
  for _ in $(seq 100); do [[ -s "${dir}/addr" ]] && break; sleep 0.1; done
  addr=$(cat "${dir}/addr")
  for s in 0 1; do
    "${strata[@]}" server --scheduler "${addr}" --shard $s 2>"${dir}/server$s.log" & pids+=($!)
  done
  # Any text makes byte-level tokens; the repository's docs are at hand.
  "${strata[@]}" worker --scheduler "${addr}" --device "${DEVICE:-cuda}" --layers "${layers}" \
    --heads "${heads}" --width "${width}" --context "${context}" --batch "${b}" \
    --vocab 50257 --steps 8 --eval_every 0 --data docs ${WORKER_FLAGS:-} \
    --metrics "${dir}/metrics.jsonl" 2>"${dir}/worker.log" ||
    { tail -5 "${dir}/worker.log" >&2; }
  # Whether the model's host buffers went into the shared region (pinned
  # there) or stayed out, and why: stderr, beside the figures.
  grep -hE "in shared memory|stays out of shared memory|host buffers stay unpinned" \
    "${dir}/worker.log" >&2 || true
  if [[ -s "${dir}/metrics.jsonl" ]]; then
    through+="$(python3 - "${dir}/metrics.jsonl" "${config}_B${b}_T${context}" "$((b * context))" <<'PY'
import json, sys
t = [json.loads(l)["elapsed_s"] for l in open(sys.argv[1])]
print("gpu_tokens_per_s_through_servers %s %.0f" % (sys.argv[2], int(sys.argv[3]) * (len(t) - 3) / (t[-1] - t[2])))
PY
)"$'\n'
  fi
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "${dir}"
done
echo -n "${through}"
[[ "${only}" == only ]] && exit 0
join_figures gpu_tokens_per_s "${ours}" "${through}" ratio_to_resident "y / x"
