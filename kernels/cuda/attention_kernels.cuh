// The softmax kernels of the unfused attention (attention.cu launches them
// between its cuBLAS GEMMs): a warp per row. A header so the CPU emulation
// tests can compile them too (see attention_fused_kernels.cuh).
#ifndef STRATA_KERNELS_CUDA_ATTENTION_KERNELS_CUH_
#define STRATA_KERNELS_CUDA_ATTENTION_KERNELS_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda::unfused {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 32 * kWarpsPerBlock;

// The grid of either kernel for `rows` rows, a warp each.
inline int SoftmaxBlocks(int64_t rows) { return Blocks(rows, kWarpsPerBlock); }

// att[row, j] = softmax over j <= t of scores[row, j], 0 for j > t, where
// row indexes (b, h, t). scores and att are (rows, T).
__global__ void CausalSoftmaxKernel(bf16* att, const float* scores,
                                    int64_t rows, int T) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T);
  const float* s = scores + row * T;
  float m = -INFINITY;
  for (int j = lane; j <= t; j += 32) m = fmaxf(m, s[j]);
  m = WarpMax(m);
  float sum = 0;
  for (int j = lane; j <= t; j += 32) sum += expf(s[j] - m);
  const float inv = 1.0f / WarpSum(sum);
  bf16* p = att + row * T;
  for (int j = lane; j < T; j += 32) {
    p[j] = __float2bfloat16(j <= t ? expf(s[j] - m) * inv : 0.0f);
  }
}

// dsoft[row, j] = P[j] * (dP[j] - sum_k P[k] dP[k]) for j <= t, else 0.
__global__ void SoftmaxBackwardKernel(bf16* dsoft, const float* dscores,
                                      const bf16* att, int64_t rows, int T) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T);
  const float* dp = dscores + row * T;
  const bf16* p = att + row * T;
  float dot = 0;
  for (int j = lane; j <= t; j += 32) dot += __bfloat162float(p[j]) * dp[j];
  dot = WarpSum(dot);
  bf16* ds = dsoft + row * T;
  for (int j = lane; j < T; j += 32) {
    const float v = j <= t ? __bfloat162float(p[j]) * (dp[j] - dot) : 0.0f;
    ds[j] = __float2bfloat16(v);
  }
}

}  // namespace strata::kernels::cuda::unfused

#endif  // STRATA_KERNELS_CUDA_ATTENTION_KERNELS_CUH_
