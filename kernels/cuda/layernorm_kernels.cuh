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

// The parameter-gradient kernel: blocks of 32 columns x 8 row lanes (reads
// coalesced along a row); block row y takes rows y*8 + lane, strided by the
// grid's rows, sums them in registers, reduces the 8 lanes in shared memory
// and adds the result with one atomic per column and block.
constexpr int kParamRowLanes = 8;
inline dim3 ParamGradGrid(int N, int C) {
  return ColumnReduceGrid(N, C, kParamRowLanes);
}
inline dim3 ParamGradBlock() { return dim3(32, kParamRowLanes); }
// Its dynamic shared memory: the lanes' partial sums of dweight and dbias,
// rows padded to 33.
constexpr int kParamGradSharedBytes = 2 * kParamRowLanes * 33 * 4;

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

// dinp += the input gradient; one warp per row (grid Blocks(N,
// kWarpsPerBlock)), each lane kN consecutive columns at a time (8: 16-byte
// accesses, where the launcher finds the rows Vectorizable; else 1). The
// parameter gradients are LayerNormParamGradKernel's: summing them here,
// across rows, took shared-memory atomics per element.
template <int kN>
__global__ void LayerNormBackwardKernel(bf16* dinp, const bf16* dout,
                                        const bf16* inp, const bf16* weight,
                                        const float* mean, const float* rstd,
                                        int N, int C) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;  // the whole warp
  const bf16* x = inp + int64_t{row} * C;
  const bf16* dy = dout + int64_t{row} * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int c = lane * kN; c < C; c += 32 * kN) {
    float xv[kN], dv[kN], wv[kN];
    LoadBf16<kN>(xv, x + c);
    LoadBf16<kN>(dv, dy + c);
    LoadBf16<kN>(wv, weight + c);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float dnorm = dv[k] * wv[k];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * ((xv[k] - m) * s);
    }
  }
  dnorm_mean = WarpSum(dnorm_mean) / C;
  dnorm_norm_mean = WarpSum(dnorm_norm_mean) / C;
  bf16* dx = dinp + int64_t{row} * C;
  for (int c = lane * kN; c < C; c += 32 * kN) {
    float xv[kN], dv[kN], wv[kN], acc[kN];
    LoadBf16<kN>(xv, x + c);
    LoadBf16<kN>(dv, dy + c);
    LoadBf16<kN>(wv, weight + c);
    LoadBf16<kN>(acc, dx + c);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float norm = (xv[k] - m) * s;
      acc[k] += s * (dv[k] * wv[k] - dnorm_mean - norm * dnorm_norm_mean);
    }
    StoreBf16<kN>(dx + c, acc);
  }
}

// dweight[c] += sum over rows of dout[:, c] * norm[:, c]; dbias[c] += sum
// of dout[:, c]. Grid ParamGradGrid, block ParamGradBlock,
// kParamGradSharedBytes.
__global__ void LayerNormParamGradKernel(float* dweight, float* dbias,
                                         const bf16* dout, const bf16* inp,
                                         const float* mean, const float* rstd,
                                         int N, int C) {
  STRATA_DYNAMIC_SMEM(smem);
  auto* part_w = reinterpret_cast<float(*)[33]>(smem);  // [lanes][33]
  auto* part_b = part_w + kParamRowLanes;
  const int c = blockIdx.x * 32 + threadIdx.x;
  float sum_w = 0, sum_b = 0;
  if (c < C) {
    for (int n = blockIdx.y * kParamRowLanes + threadIdx.y; n < N;
         n += gridDim.y * kParamRowLanes) {
      const int64_t i = int64_t{n} * C + c;
      const float d = __bfloat162float(dout[i]);
      sum_w += d * ((__bfloat162float(inp[i]) - mean[n]) * rstd[n]);
      sum_b += d;
    }
  }
  part_w[threadIdx.y][threadIdx.x] = sum_w;
  part_b[threadIdx.y][threadIdx.x] = sum_b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kParamRowLanes; ++y) {
      sum_w += part_w[y][threadIdx.x];
      sum_b += part_b[y][threadIdx.x];
    }
    atomicAdd(&dweight[c], sum_w);
    atomicAdd(&dbias[c], sum_b);
  }
}

}  // namespace strata::kernels::cuda::layernorm

#endif  // STRATA_KERNELS_CUDA_LAYERNORM_KERNELS_CUH_
