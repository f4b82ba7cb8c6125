// Helpers shared by the CUDA kernels. Private to kernels/cuda/.
#ifndef STRATA_KERNELS_CUDA_COMMON_CUH_
#define STRATA_KERNELS_CUDA_COMMON_CUH_

#include <cstdint>
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

}  // namespace strata::kernels::cuda

#endif  // STRATA_KERNELS_CUDA_COMMON_CUH_
