// The fp32 -> bf16 conversion kernel of GptCuda (gpt_cuda_convert.cu
// launches it). A header so the CPU emulation tests can compile it too (see
// kernels/cuda/attention_fused_kernels.cuh). Private to worker/.
#ifndef STRATA_MODEL_GPT_CUDA_CONVERT_KERNELS_CUH_
#define STRATA_MODEL_GPT_CUDA_CONVERT_KERNELS_CUH_

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_ops.h"

namespace strata::gpt_cuda::convert {

constexpr int kThreads = 256;

// The grid for n elements: at most 2^16 blocks; the kernel's loop covers
// the rest.
inline int FloatToBf16Blocks(int64_t n) {
  return static_cast<int>(
      std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16));
}

// Grid-stride, so any n fits in a bounded grid.
__global__ void FloatToBf16Kernel(kernels::cuda::bf16* out, const float* in,
                                  int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += stride) {
    out[i] = __float2bfloat16(in[i]);
  }
}

}  // namespace strata::gpt_cuda::convert

#endif  // STRATA_MODEL_GPT_CUDA_CONVERT_KERNELS_CUH_
