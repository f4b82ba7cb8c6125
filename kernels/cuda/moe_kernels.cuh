// The mixture-of-experts layer's data movement (moe.cu launches them): rows
// to the experts, their outputs back, and the backward of both. The routing
// itself runs on the host (model/moe_router.h); these kernels take its
// result as indices: `src` (R) the token of each of the R rows the experts
// run over (packed expert by expert), and `row`, `gate` (N,K) the row and
// weight of token t's k-th choice (row -1: dropped). A header so the CPU
// emulation tests can compile them too (see attention_fused_kernels.cuh).
#ifndef STRATA_KERNELS_CUDA_MOE_KERNELS_CUH_
#define STRATA_KERNELS_CUDA_MOE_KERNELS_CUH_

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda::moe {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// out (R,C) = in[src[r]]: one thread an element.
__global__ void GatherRowsKernel(bf16* out, const bf16* in, const int32_t* src,
                                 int64_t R, int C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= R * C) return;
  const int64_t r = i / C;
  out[i] = in[int64_t{src[r]} * C + i % C];
}

// out (N,C) = residual + Σ_k gate[t,k] · y[row[t,k]], summed in fp32 and
// rounded once: one thread an element.
__global__ void CombineKernel(bf16* out, const bf16* residual, const bf16* y,
                              const int32_t* row, const float* gate, int64_t N,
                              int K, int C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= N * C) return;
  const int64_t t = i / C;
  const int c = static_cast<int>(i % C);
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) {
    const int32_t r = row[t * K + k];
    if (r >= 0)
      acc += gate[t * K + k] * __bfloat162float(y[int64_t{r} * C + c]);
  }
  out[i] = __float2bfloat16(__bfloat162float(residual[i]) + acc);
}

// The combine's backward for dout (N,C): dy[row[t,k]] = gate[t,k] · dout[t]
// and dgate[t,k] = dout[t] · y[row[t,k]] (0 for a dropped choice). One
// warp an assignment (t,k); grid Blocks(N·K, kWarps).
__global__ void CombineBackwardKernel(bf16* dy, float* dgate, const bf16* dout,
                                      const bf16* y, const int32_t* row,
                                      const float* gate, int64_t NK, int K,
                                      int C) {
  const int64_t a = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (a >= NK) return;
  const int32_t r = row[a];
  float dot = 0.0f;
  if (r >= 0) {
    const bf16* d = dout + (a / K) * C;
    const bf16* yr = y + int64_t{r} * C;
    bf16* dyr = dy + int64_t{r} * C;
    const float g = gate[a];
    for (int c = lane; c < C; c += 32) {
      const float v = __bfloat162float(d[c]);
      dot += v * __bfloat162float(yr[c]);
      dyr[c] = __float2bfloat16(g * v);
    }
  }
  dot = WarpSum(dot);
  if (lane == 0) dgate[a] = dot;
}

// dx (N,C) += Σ_k din[row[t,k]]: the experts' input gradients back to
// their tokens, in choice order (no atomics: the sums are reproducible).
// One thread an element.
__global__ void AddRowsKernel(bf16* dx, const bf16* din, const int32_t* row,
                              int64_t N, int K, int C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= N * C) return;
  const int64_t t = i / C;
  const int c = static_cast<int>(i % C);
  float acc = __bfloat162float(dx[i]);
  for (int k = 0; k < K; ++k) {
    const int32_t r = row[t * K + k];
    if (r >= 0) acc += __bfloat162float(din[int64_t{r} * C + c]);
  }
  dx[i] = __float2bfloat16(acc);
}

}  // namespace strata::kernels::cuda::moe

#endif  // STRATA_KERNELS_CUDA_MOE_KERNELS_CUH_
