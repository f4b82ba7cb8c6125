// LayerNorm's device code (layernorm.cu launches it); a header so the CPU
// emulation tests can compile it too (see attention_fused_kernels.cuh).
#ifndef STRATA_KERNELS_CUDA_LAYERNORM_KERNELS_CUH_
#define STRATA_KERNELS_CUDA_LAYERNORM_KERNELS_CUH_

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/layernorm.h"

namespace strata::kernels::cuda::layernorm {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 32 * kWarpsPerBlock;
// Backward blocks: enough to fill a large GPU twice (132 SMs on an H100);
// each accumulates its rows' dweight and dbias in shared memory and adds
// them to the outputs once, so the global atomics per column are as many
// as the blocks rather than the rows.
constexpr int kMaxBackwardBlocks = 264;

inline int BackwardBlocks(int N) {
  return static_cast<int>(
      std::min<int64_t>(Blocks(N, kWarpsPerBlock), kMaxBackwardBlocks));
}
// Dynamic shared memory of the backward kernel: dweight and dbias partials.
inline int64_t BackwardSharedBytes(int C) { return int64_t{2} * C * 4; }

// One warp per row, fp32 statistics.
__global__ void LayerNormForwardKernel(bf16* out, float* mean, float* rstd,
                                       const bf16* inp, const bf16* weight,
                                       const bf16* bias, int N, int C) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;  // the whole warp
  const bf16* x = inp + int64_t{row} * C;
  float sum = 0;
  for (int c = lane; c < C; c += 32) sum += __bfloat162float(x[c]);
  const float m = WarpSum(sum) / C;
  float var = 0;
  for (int c = lane; c < C; c += 32) {
    const float d = __bfloat162float(x[c]) - m;
    var += d * d;
  }
  const float s = rsqrtf(WarpSum(var) / C + kLayerNormEps);
  bf16* y = out + int64_t{row} * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (__bfloat162float(x[c]) - m) * s;
    y[c] = __float2bfloat16(norm * __bfloat162float(weight[c]) +
                            __bfloat162float(bias[c]));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// A warp per row, rows strided over the grid (BackwardBlocks); dinp, dweight
// and dbias accumulated.
__global__ void LayerNormBackwardKernel(bf16* dinp, float* dweight,
                                        float* dbias, const bf16* dout,
                                        const bf16* inp, const bf16* weight,
                                        const float* mean, const float* rstd,
                                        int N, int C) {
  STRATA_DYNAMIC_SMEM(smem);
  float* dw = reinterpret_cast<float*>(smem);  // (C) partial dweight
  float* db = dw + C;                          // (C) partial dbias
  for (int c = threadIdx.x; c < 2 * C; c += kThreads) dw[c] = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  for (int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32; row < N;
       row += gridDim.x * kWarpsPerBlock) {
    const bf16* x = inp + int64_t{row} * C;
    const bf16* dy = dout + int64_t{row} * C;
    const float m = mean[row], s = rstd[row];
    float dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int c = lane; c < C; c += 32) {
      const float norm = (__bfloat162float(x[c]) - m) * s;
      const float dnorm = __bfloat162float(dy[c]) * __bfloat162float(weight[c]);
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean = WarpSum(dnorm_mean) / C;
    dnorm_norm_mean = WarpSum(dnorm_norm_mean) / C;
    bf16* dx = dinp + int64_t{row} * C;
    for (int c = lane; c < C; c += 32) {
      const float norm = (__bfloat162float(x[c]) - m) * s;
      const float d = __bfloat162float(dy[c]);
      const float dnorm = d * __bfloat162float(weight[c]);
      atomicAdd(&dw[c], d * norm);  // shared: at most 8 warps contend
      atomicAdd(&db[c], d);
      const float g = s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
      dx[c] = __float2bfloat16(__bfloat162float(dx[c]) + g);
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += kThreads) {
    atomicAdd(&dweight[c], dw[c]);
    atomicAdd(&dbias[c], db[c]);
  }
}

}  // namespace strata::kernels::cuda::layernorm

#endif  // STRATA_KERNELS_CUDA_LAYERNORM_KERNELS_CUH_
