// Context, status conversion and the cuBLAS GEMM wrapper.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  // Clear a non-sticky error (e.g. out of memory) so that a later launch
  // check does not report it against another kernel.
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

absl::Status CublasStatus(cublasStatus_t err, const char* what) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": cuBLAS status ", static_cast<int>(err)));
}

absl::Status Require(bool ok, const char* what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(what);
}

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<Context>> Context::Create() {
  if (DeviceCount() == 0) return absl::UnavailableError("no CUDA device");
  std::unique_ptr<Context> ctx(new Context());
  if (absl::Status s =
          CudaStatus(cudaStreamCreate(&ctx->stream_), "cudaStreamCreate");
      !s.ok()) {
    return s;
  }
  int device = 0;
  if (absl::Status s = CudaStatus(cudaGetDevice(&device), "cudaGetDevice");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CudaStatus(cudaDeviceGetAttribute(
                         &ctx->max_shared_bytes_,
                         cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                     "cudaDeviceGetAttribute");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CublasStatus(cublasCreate(&ctx->cublas_), "cublasCreate");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CublasStatus(cublasSetStream(ctx->cublas_, ctx->stream_),
                                    "cublasSetStream");
      !s.ok()) {
    return s;
  }
  return ctx;
}

Context::~Context() {
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status Context::Synchronize() {
  return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

absl::Status GemmBatched(Context& ctx, bool trans_a, bool trans_b, int M, int N,
                         int K, float alpha, const bf16* A, int lda,
                         int64_t stride_a, const bf16* B, int ldb,
                         int64_t stride_b, float beta, void* C,
                         cudaDataType_t c_type, int ldc, int64_t stride_c,
                         int batch) {
  // cuBLAS is column-major: row-major C = op(A) op(B) is column-major
  // C^T = op(B)^T op(A)^T, i.e. the same call with A and B swapped.
  return CublasStatus(
      cublasGemmStridedBatchedEx(
          ctx.cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16BF,
          ldb, stride_b, A, CUDA_R_16BF, lda, stride_a, &beta, C, c_type, ldc,
          stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

}  // namespace strata::kernels::cuda
