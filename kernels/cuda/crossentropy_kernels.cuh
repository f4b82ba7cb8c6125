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
// The staged kernel's block, and its shared memory for rows of V logits:
// the partials (padded to 128 bytes), then the row.
constexpr int kStagedThreads = 1024;
inline int64_t StagedSharedBytes(int V) { return 128 + int64_t{V} * 4; }

// The sum (or max) of `v` over the block of kBlock threads, broadcast to
// every thread. `partial` is shared memory for kBlock / 32 floats.
template <bool kMax, int kBlock>
__device__ float BlockReduce(float v, float* partial) {
  __syncthreads();  // `partial` may still be read from a previous call
  v = kMax ? WarpMax(v) : WarpSum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = partial[0];
  for (int w = 1; w < kBlock / 32; ++w) {
    v = kMax ? fmaxf(v, partial[w]) : v + partial[w];
  }
  return v;
}

// Grid: one block of kBlock threads per row; shared memory kBlock / 32
// floats, or StagedSharedBytes(V) with kStaged. Row `row` of logits holds V
// logits at logits + row * ld (ld >= V); columns [V, ld) are padding (the
// padded vocabulary of GptCuda's LM head): they are never read, and their
// dlogits are written as 0. One pass over the logits finds the max and the
// sum of exponentials together (online softmax: a thread rescales its sum
// when its max grows), a second writes dlogits. With kStaged the first
// pass also keeps the row in shared memory and the second reads it there,
// so the logits are read from global memory once.
template <int kBlock, bool kStaged>
__global__ void __launch_bounds__(kBlock)
    SoftmaxCrossEntropyKernel(bf16* dlogits, float* losses, const float* logits,
                              const int32_t* targets, float dloss, int V,
                              int ld) {
  STRATA_DYNAMIC_SMEM(smem);
  float* partial = reinterpret_cast<float*>(smem);       // (kBlock / 32)
  float* staged = reinterpret_cast<float*>(smem + 128);  // (V), kStaged
  const int64_t row = blockIdx.x;
  const float* x = logits + row * ld;
  float m = -INFINITY, sum = 0;
#pragma unroll 4
  for (int v = threadIdx.x; v < V; v += kBlock) {
    const float xv = x[v];
    if constexpr (kStaged) staged[v] = xv;
    if (xv > m) {
      sum = sum * expf(m - xv) + 1.0f;
      m = xv;
    } else {
      sum += expf(xv - m);
    }
  }
  const float row_max = BlockReduce<true, kBlock>(m, partial);
  // A thread that saw no column (m = -inf) has sum 0.
  sum = sum == 0.0f ? 0.0f : sum * expf(m - row_max);
  // (BlockReduce's barriers also make the staged row visible.)
  sum = BlockReduce<false, kBlock>(sum, partial);
  const float* xs = kStaged ? staged : x;
  const int target = targets[row];
  if (threadIdx.x == 0) losses[row] = row_max + logf(sum) - xs[target];
  const float scale = dloss / sum;
  bf16* d = dlogits + row * ld;
  for (int v = threadIdx.x; v < V; v += kBlock) {
    const float g =
        expf(xs[v] - row_max) * scale - (v == target ? dloss : 0.0f);
    d[v] = __float2bfloat16(g);
  }
  for (int v = V + threadIdx.x; v < ld; v += kBlock) {
    d[v] = __float2bfloat16(0.0f);
  }
}

}  // namespace strata::kernels::cuda::crossentropy

#endif  // STRATA_KERNELS_CUDA_CROSSENTROPY_KERNELS_CUH_
