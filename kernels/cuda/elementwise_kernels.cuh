// The encoder, GELU and residual kernels (elementwise.cu launches them): one
// thread per element. A header so the CPU emulation tests can compile them
// too (see attention_fused_kernels.cuh).
#ifndef STRATA_KERNELS_CUDA_ELEMENTWISE_KERNELS_CUH_
#define STRATA_KERNELS_CUDA_ELEMENTWISE_KERNELS_CUH_

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda::elementwise {

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

// The grid for n elements, one thread each.
inline int ElementBlocks(int64_t n) { return Blocks(n, kThreads); }

__global__ void EncoderForwardKernel(bf16* out, const int32_t* tokens,
                                     const bf16* wte, const bf16* wpe,
                                     int64_t N, int T, int C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= N * C) return;
  const int64_t n = i / C;
  const int c = static_cast<int>(i % C);
  const float v = __bfloat162float(wte[int64_t{tokens[n]} * C + c]) +
                  __bfloat162float(wpe[(n % T) * C + c]);
  out[i] = __float2bfloat16(v);
}

__global__ void EncoderBackwardKernel(float* dwte, float* dwpe,
                                      const bf16* dout, const int32_t* tokens,
                                      int64_t N, int T, int C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= N * C) return;
  const int64_t n = i / C;
  const int c = static_cast<int>(i % C);
  const float d = __bfloat162float(dout[i]);
  atomicAdd(&dwte[int64_t{tokens[n]} * C + c], d);
  atomicAdd(&dwpe[(n % T) * C + c], d);
}

__global__ void GeluForwardKernel(bf16* out, const bf16* inp, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float x = __bfloat162float(inp[i]);
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  out[i] = __float2bfloat16(0.5f * x * (1.0f + tanhf(u)));
}

__global__ void GeluBackwardKernel(bf16* dinp, const bf16* inp,
                                   const bf16* dout, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float x = __bfloat162float(inp[i]);
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float t = tanhf(u);
  const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  const float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
  dinp[i] = __float2bfloat16(grad * __bfloat162float(dout[i]));
}

__global__ void ResidualForwardKernel(bf16* out, const bf16* a, const bf16* b,
                                      int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) {
    out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
  }
}

__global__ void ResidualBackwardKernel(bf16* da, bf16* db, const bf16* dout,
                                       int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float d = __bfloat162float(dout[i]);
  da[i] = __float2bfloat16(__bfloat162float(da[i]) + d);
  db[i] = __float2bfloat16(__bfloat162float(db[i]) + d);
}

}  // namespace strata::kernels::cuda::elementwise

#endif  // STRATA_KERNELS_CUDA_ELEMENTWISE_KERNELS_CUH_
