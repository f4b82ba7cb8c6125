// The device Adam/AdamW kernels (optimizer.cu launches them): one thread
// per element, the formula of optim/adam_step.h. A header so the CPU
// emulation tests can compile it too (see attention_fused_kernels.cuh).
#ifndef STRATA_KERNELS_CUDA_OPTIMIZER_KERNELS_CUH_
#define STRATA_KERNELS_CUDA_OPTIMIZER_KERNELS_CUH_

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda::optimizer {

constexpr int kThreads = 256;

// The grid for n elements: enough blocks to fill any current GPU several
// times over; the kernel's loop covers the rest.
inline int AdamBlocks(int64_t n) {
  return static_cast<int>(
      std::min<int64_t>(Blocks(n, kThreads), int64_t{132} * 16));
}

// Element i's update.
__device__ inline void AdamElement(int64_t i, float* w, bf16* w_bf16, float* m,
                                   float* v, const float* g,
                                   const AdamStep& s) {
  const float wi = w[i];
  const float gi = g[i] + s.l2 * wi;
  const float mi = s.b1 * m[i] + s.one_minus_b1 * gi;
  const float vi = s.b2 * v[i] + s.one_minus_b2 * (gi * gi);
  m[i] = mi;
  v[i] = vi;
  const float wn =
      wi * s.decay - (s.step_size * mi) / (sqrtf(vi) * s.inv_sqrt_bc2 + s.eps);
  w[i] = wn;
  if (w_bf16 != nullptr) w_bf16[i] = __float2bfloat16(wn);
}

// Grid-stride, so any n fits in a bounded grid.
__global__ void AdamKernel(float* w, bf16* w_bf16, float* m, float* v,
                           const float* g, int64_t n, AdamStep s) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += stride) {
    AdamElement(i, w, w_bf16, m, v, g, s);
  }
}

// Elements a block takes at a time in AdamSpansKernel.
constexpr int kSpanTile = 16 * kThreads;

// AdamUpdateSpans (kernels/cuda_ops.h): blocks take tiles of kSpanTile
// elements, grid-stride; a thread finds the span of its first element in a
// tile by binary search over starts, then walks forward.
__global__ void AdamSpansKernel(float* w, bf16* w_bf16, float* m, float* v,
                                const float* g, const int64_t* starts,
                                const uint8_t* kinds, int spans, int64_t n,
                                AdamStep s0, AdamStep s1) {
  for (int64_t tile = blockIdx.x * int64_t{kSpanTile}; tile < n;
       tile += int64_t{gridDim.x} * kSpanTile) {
    const int64_t end = tile + kSpanTile < n ? tile + kSpanTile : n;
    int64_t i = tile + threadIdx.x;
    if (i >= end) continue;
    int lo = 0, hi = spans - 1;  // the last span with starts[span] <= i
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (starts[mid] <= i) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    for (int span = lo; i < end; i += blockDim.x) {
      while (starts[span + 1] <= i) ++span;
      const uint8_t kind = kinds[span];
      if (kind <= 1) {  // else kAdamSpanUntouched
        AdamElement(i, w, w_bf16, m, v, g, kind == 0 ? s0 : s1);
      }
    }
  }
}

}  // namespace strata::kernels::cuda::optimizer

#endif  // STRATA_KERNELS_CUDA_OPTIMIZER_KERNELS_CUH_
