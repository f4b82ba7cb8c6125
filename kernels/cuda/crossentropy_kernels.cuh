// The fused softmax cross-entropy kernel (crossentropy.cu launches it): one
// block per row of logits. A header so the CPU emulation tests can compile
// it too (see attention_fused_kernels.cuh).
#ifndef STRATA_KERNELS_CUDA_CROSSENTROPY_KERNELS_CUH_
#define STRATA_KERNELS_CUDA_CROSSENTROPY_KERNELS_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda::crossentropy {

constexpr int kThreads = 512;
// Dynamic shared memory of the kernel: BlockReduce's per-warp partials.
constexpr int kSharedBytes = kThreads / 32 * 4;

// The sum (or max) of `v` over the block, broadcast to every thread.
// `partial` is shared memory for kThreads / 32 floats.
template <bool kMax>
__device__ float BlockReduce(float v, float* partial) {
  __syncthreads();  // `partial` may still be read from a previous call
  v = kMax ? WarpMax(v) : WarpSum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = partial[0];
  for (int w = 1; w < kThreads / 32; ++w) {
    v = kMax ? fmaxf(v, partial[w]) : v + partial[w];
  }
  return v;
}

// Grid: one block of kThreads per row, kSharedBytes of shared memory.
__global__ void SoftmaxCrossEntropyKernel(bf16* dlogits, float* losses,
                                          const float* logits,
                                          const int32_t* targets, float dloss,
                                          int V) {
  STRATA_DYNAMIC_SMEM(smem);
  float* partial = reinterpret_cast<float*>(smem);  // (kThreads / 32)
  const int64_t row = blockIdx.x;
  const float* x = logits + row * V;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += kThreads) m = fmaxf(m, x[v]);
  m = BlockReduce<true>(m, partial);
  float sum = 0;
  for (int v = threadIdx.x; v < V; v += kThreads) sum += expf(x[v] - m);
  sum = BlockReduce<false>(sum, partial);
  const int target = targets[row];
  if (threadIdx.x == 0) losses[row] = m + logf(sum) - x[target];
  const float scale = dloss / sum;
  bf16* d = dlogits + row * V;
  for (int v = threadIdx.x; v < V; v += kThreads) {
    const float g = expf(x[v] - m) * scale - (v == target ? dloss : 0.0f);
    d[v] = __float2bfloat16(g);
  }
}

}  // namespace strata::kernels::cuda::crossentropy

#endif  // STRATA_KERNELS_CUDA_CROSSENTROPY_KERNELS_CUH_
