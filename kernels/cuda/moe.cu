// The mixture-of-experts launchers: the router's logits (a cuBLAS GEMM with
// an fp32 output) and the kernels of moe_kernels.cuh.
#include "kernels/cuda/moe_kernels.cuh"

namespace strata::kernels::cuda {

using namespace moe;  // NOLINT: this file launches them

absl::Status MoeRouterLogits(Context& ctx, float* logits, const bf16* inp,
                             const bf16* router, int N, int C, int E) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(N > 0 && C > 0 && E > 0, "MoeRouterLogits: N, C, E > 0"));
  return GemmBatched(ctx, false, true, N, E, C, 1.0f, inp, C, 0, router, C, 0,
                     0.0f, logits, CUDA_R_32F, E, 0, 1);
}

absl::Status MoeGatherRows(Context& ctx, bf16* out, const bf16* inp,
                           const int32_t* src, int R, int C) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(R >= 0 && C > 0, "MoeGatherRows: R >= 0, C > 0"));
  if (R == 0) return absl::OkStatus();
  const int64_t n = int64_t{R} * C;
  STRATA_LAUNCH(GatherRowsKernel, Blocks(n, kThreads), kThreads, 0,
                ctx.stream(), out, inp, src, int64_t{R}, C);
  return LaunchStatus("GatherRowsKernel");
}

absl::Status MoeCombine(Context& ctx, bf16* out, const bf16* residual,
                        const bf16* y, const int32_t* row, const float* gate,
                        int N, int K, int C) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(N > 0 && C > 0 && (K == 1 || K == 2),
                                      "MoeCombine: N, C > 0, K 1 or 2"));
  const int64_t n = int64_t{N} * C;
  STRATA_LAUNCH(CombineKernel, Blocks(n, kThreads), kThreads, 0, ctx.stream(),
                out, residual, y, row, gate, int64_t{N}, K, C);
  return LaunchStatus("CombineKernel");
}

absl::Status MoeCombineBackward(Context& ctx, bf16* dy, float* dgate,
                                const bf16* dout, const bf16* y,
                                const int32_t* row, const float* gate, int N,
                                int K, int C) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(N > 0 && C > 0 && (K == 1 || K == 2),
              "MoeCombineBackward: N, C > 0, K 1 or 2"));
  const int64_t nk = int64_t{N} * K;
  STRATA_LAUNCH(CombineBackwardKernel, Blocks(nk, kWarps), kThreads, 0,
                ctx.stream(), dy, dgate, dout, y, row, gate, nk, K, C);
  return LaunchStatus("CombineBackwardKernel");
}

absl::Status MoeAddRows(Context& ctx, bf16* dx, const bf16* din,
                        const int32_t* row, int N, int K, int C) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(N > 0 && C > 0 && (K == 1 || K == 2),
                                      "MoeAddRows: N, C > 0, K 1 or 2"));
  const int64_t n = int64_t{N} * C;
  STRATA_LAUNCH(AddRowsKernel, Blocks(n, kThreads), kThreads, 0, ctx.stream(),
                dx, din, row, int64_t{N}, K, C);
  return LaunchStatus("AddRowsKernel");
}

}  // namespace strata::kernels::cuda
