// Helpers shared by the CUDA kernels. Private to kernels/cuda/.
#ifndef STRATA_KERNELS_CUDA_COMMON_CUH_
#define STRATA_KERNELS_CUDA_COMMON_CUH_

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_ops.h"

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define STRATA_CUDA_RETURN_IF_ERROR(expr)                      \
  do {                                                         \
    ::absl::Status strata_cuda_status_ = (expr);               \
    if (!strata_cuda_status_.ok()) return strata_cuda_status_; \
  } while (0)

namespace strata::kernels::cuda {

// The status of the last launch on this thread.
inline absl::Status LaunchStatus(const char* kernel) {
  return CudaStatus(cudaGetLastError(), kernel);
}

// INVALID_ARGUMENT naming `what` unless `ok`.
absl::Status Require(bool ok, const char* what);

inline int Blocks(int64_t n, int threads) {
  return static_cast<int>((n + threads - 1) / threads);
}

// Row-major, strided-batched C = alpha op(A) op(B) + beta C with fp32
// compute; A and B bf16, C bf16 or fp32 (c_type). See kernels::Gemm for the
// argument meanings.
absl::Status GemmBatched(Context& ctx, bool trans_a, bool trans_b, int M, int N,
                         int K, float alpha, const bf16* A, int lda,
                         int64_t stride_a, const bf16* B, int ldb,
                         int64_t stride_b, float beta, void* C,
                         cudaDataType_t c_type, int ldc, int64_t stride_c,
                         int batch);

// The grid of a column reduction over an (N, C) matrix in blocks of 32
// columns x `row_lanes` rows (the bias and LayerNorm parameter gradients):
// one block column per 32 columns, and enough block rows for about 1024
// blocks in all.
inline dim3 ColumnReduceGrid(int N, int C, int row_lanes) {
  const int col_blocks = (C + 31) / 32;
  const int64_t rows =
      std::min<int64_t>(Blocks(N, row_lanes), std::max(1024 / col_blocks, 1));
  return dim3(col_blocks,
              static_cast<int>(std::clamp<int64_t>(rows, 1, 65535)));
}

// Sum of `v` over a warp, broadcast to all lanes.
__device__ inline float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

__device__ inline float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  }
  return v;
}

// kN consecutive bf16 values at p as floats, and back: one 16-byte access
// for kN = 8 (p 16-byte aligned), plain loads and stores for kN = 1. The
// elementwise kernels take kN = 8 where their launcher finds every pointer
// aligned and the length a multiple of 8, else 1.
// Eight bf16 values as one 16-byte access (a struct of bf16, so that the
// host compiler of the emulation may alias it with the bf16 arrays).
struct alignas(16) Bf16x8 {
  bf16 h[8];
};

template <int kN>
__device__ inline void LoadBf16(float (&f)[kN], const bf16* p) {
  static_assert(kN == 1 || kN == 8, "1 or 8 values");
  if constexpr (kN == 8) {
    STRATA_DEVICE_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0,
                        "LoadBf16: 16-byte vector access misaligned");
    const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(p);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = __bfloat162float(v.h[i]);
  } else {
    f[0] = __bfloat162float(*p);
  }
}

template <int kN>
__device__ inline void StoreBf16(bf16* p, const float (&f)[kN]) {
  static_assert(kN == 1 || kN == 8, "1 or 8 values");
  if constexpr (kN == 8) {
    STRATA_DEVICE_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0,
                        "StoreBf16: 16-byte vector access misaligned");
    Bf16x8 v;
#pragma unroll
    for (int i = 0; i < 8; ++i) v.h[i] = __float2bfloat16(f[i]);
    *reinterpret_cast<Bf16x8*>(p) = v;
  } else {
    *p = __float2bfloat16(f[0]);
  }
}

// True when each pointer is 16-byte aligned and n is a multiple of 8: the
// condition for LoadBf16<8> and StoreBf16<8> over n elements.
inline bool Vectorizable(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % 8 != 0) return false;
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

}  // namespace strata::kernels::cuda

#endif  // STRATA_KERNELS_CUDA_COMMON_CUH_
