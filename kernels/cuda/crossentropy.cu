// Fused softmax cross-entropy: one block per row of logits.
#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 512;

// The sum (or max) of `v` over the block, broadcast to every thread.
template <bool kMax>
__device__ float BlockReduce(float v) {
  __shared__ float partial[kThreads / 32];
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

__global__ void SoftmaxCrossEntropyKernel(bf16* dlogits, float* losses,
                                          const float* logits,
                                          const int32_t* targets, float dloss,
                                          int V) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * V;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += kThreads) m = fmaxf(m, x[v]);
  m = BlockReduce<true>(m);
  float sum = 0;
  for (int v = threadIdx.x; v < V; v += kThreads) sum += expf(x[v] - m);
  sum = BlockReduce<false>(sum);
  const int target = targets[row];
  if (threadIdx.x == 0) losses[row] = m + logf(sum) - x[target];
  const float scale = dloss / sum;
  bf16* d = dlogits + row * V;
  for (int v = threadIdx.x; v < V; v += kThreads) {
    const float g = expf(x[v] - m) * scale - (v == target ? dloss : 0.0f);
    d[v] = __float2bfloat16(g);
  }
}

}  // namespace

absl::Status SoftmaxCrossEntropyFused(Context& ctx, bf16* dlogits,
                                      float* losses, const float* logits,
                                      const int32_t* targets, float dloss,
                                      int N, int V) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(N > 0 && V > 0, "SoftmaxCrossEntropy: N, V > 0"));
  SoftmaxCrossEntropyKernel<<<N, kThreads, 0, ctx.stream()>>>(
      dlogits, losses, logits, targets, dloss, V);
  return LaunchStatus("SoftmaxCrossEntropyKernel");
}

}  // namespace strata::kernels::cuda
