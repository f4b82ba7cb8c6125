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
ours="$("${bench_cmd[@]}" "$@")"
echo "${ours}"
[[ -z "${ours}" ]] && exit 0  # no device

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
if [[ "${config}" != all ]] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  theirs="$(python3 "${bench_dir}/torch_gpu_ref.py" --config "${config}" --batch "${batch}" --context "${context}")"
  echo "${theirs}"
  join_figures gpu_tokens_per_s "${ours}" "${theirs}" ratio_to_torch_gpu "x / y"
else
  echo "no CUDA-enabled torch (or --config all): skipping the PyTorch reference" >&2
fi
