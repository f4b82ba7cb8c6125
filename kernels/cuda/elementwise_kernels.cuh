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

// The kernels below take kN consecutive elements per thread (8: 16-byte
// accesses, where the launcher finds Vectorizable; else 1); grid
// ElementBlocks(n / kN).
__device__ inline float Gelu(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

template <int kN>
__global__ void GeluForwardKernel(bf16* out, const bf16* inp, int64_t n) {
  const int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kN;
  if (i >= n) return;
  float x[kN];
  LoadBf16<kN>(x, inp + i);
#pragma unroll
  for (int k = 0; k < kN; ++k) x[k] = Gelu(x[k]);
  StoreBf16<kN>(out + i, x);
}

template <int kN>
__global__ void GeluBackwardKernel(bf16* dinp, const bf16* inp,
                                   const bf16* dout, int64_t n) {
  const int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kN;
  if (i >= n) return;
  float x[kN], d[kN];
  LoadBf16<kN>(x, inp + i);
  LoadBf16<kN>(d, dout + i);
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const float u = kGeluScale * (x[k] + 0.044715f * x[k] * x[k] * x[k]);
    const float t = tanhf(u);
    const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x[k] * x[k]);
    d[k] *= 0.5f * (1.0f + t) + 0.5f * x[k] * (1.0f - t * t) * du;
  }
  StoreBf16<kN>(dinp + i, d);
}

// pre (N,OC) += bias, then out = gelu(pre): the MLP's first layer after its
// GEMM, in one pass (pre is what GELU's backward needs). kN divides OC.
template <int kN>
__global__ void BiasGeluForwardKernel(bf16* out, bf16* pre, const bf16* bias,
                                      int64_t n, int OC) {
  const int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kN;
  if (i >= n) return;
  float x[kN], b[kN];
  LoadBf16<kN>(x, pre + i);
  LoadBf16<kN>(b, bias + i % OC);
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    // Rounded as a separate bias add would round it.
    x[k] = __bfloat162float(__float2bfloat16(x[k] + b[k]));
  }
  StoreBf16<kN>(pre + i, x);
#pragma unroll
  for (int k = 0; k < kN; ++k) x[k] = Gelu(x[k]);
  StoreBf16<kN>(out + i, x);
}

// out = a + b, or with bias (OC, not null) out = a + (b + bias): a
// projection's bias and the residual add after it, in one pass. kN divides
// OC.
template <int kN>
__global__ void ResidualForwardKernel(bf16* out, const bf16* a, const bf16* b,
                                      const bf16* bias, int64_t n, int OC) {
  const int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kN;
  if (i >= n) return;
  float x[kN], y[kN];
  LoadBf16<kN>(x, a + i);
  LoadBf16<kN>(y, b + i);
  if (bias != nullptr) {
    float c[kN];
    LoadBf16<kN>(c, bias + i % OC);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      y[k] = __bfloat162float(__float2bfloat16(y[k] + c[k]));
    }
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) x[k] += y[k];
  StoreBf16<kN>(out + i, x);
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
