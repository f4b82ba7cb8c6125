// Encoder, GELU and residual launchers; the kernels (one thread per
// element) are in elementwise_kernels.cuh.
#include "kernels/cuda/elementwise_kernels.cuh"

namespace strata::kernels::cuda {

using namespace elementwise;  // NOLINT: this file launches them

absl::Status EncoderForward(Context& ctx, bf16* out, const int32_t* tokens,
                            const bf16* wte, const bf16* wpe, int B, int T,
                            int C) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(B > 0 && T > 0 && C > 0,
                                      "EncoderForward: "
                                      "B, T, C > 0"));
  const int64_t N = int64_t{B} * T;
  STRATA_LAUNCH(EncoderForwardKernel, ElementBlocks(N * C), kThreads, 0,
                ctx.stream(), out, tokens, wte, wpe, N, T, C);
  return LaunchStatus("EncoderForwardKernel");
}

absl::Status EncoderBackward(Context& ctx, float* dwte, float* dwpe,
                             const bf16* dout, const int32_t* tokens, int B,
                             int T, int C) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(B > 0 && T > 0 && C > 0,
                                      "EncoderBackward: "
                                      "B, T, C > 0"));
  const int64_t N = int64_t{B} * T;
  STRATA_LAUNCH(EncoderBackwardKernel, ElementBlocks(N * C), kThreads, 0,
                ctx.stream(), dwte, dwpe, dout, tokens, N, T, C);
  return LaunchStatus("EncoderBackwardKernel");
}

absl::Status GeluForward(Context& ctx, bf16* out, const bf16* inp, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(n >= 0, "GeluForward: n >= 0"));
  if (n == 0) return absl::OkStatus();
  STRATA_LAUNCH(GeluForwardKernel, ElementBlocks(n), kThreads, 0, ctx.stream(),
                out, inp, n);
  return LaunchStatus("GeluForwardKernel");
}

absl::Status GeluBackward(Context& ctx, bf16* dinp, const bf16* inp,
                          const bf16* dout, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(n >= 0, "GeluBackward: n >= 0"));
  if (n == 0) return absl::OkStatus();
  STRATA_LAUNCH(GeluBackwardKernel, ElementBlocks(n), kThreads, 0, ctx.stream(),
                dinp, inp, dout, n);
  return LaunchStatus("GeluBackwardKernel");
}

absl::Status ResidualForward(Context& ctx, bf16* out, const bf16* a,
                             const bf16* b, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(n >= 0, "ResidualForward: n >= 0"));
  if (n == 0) return absl::OkStatus();
  STRATA_LAUNCH(ResidualForwardKernel, ElementBlocks(n), kThreads, 0,
                ctx.stream(), out, a, b, n);
  return LaunchStatus("ResidualForwardKernel");
}

absl::Status ResidualBackward(Context& ctx, bf16* da, bf16* db,
                              const bf16* dout, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(n >= 0, "ResidualBackward: n >= 0"));
  if (n == 0) return absl::OkStatus();
  STRATA_LAUNCH(ResidualBackwardKernel, ElementBlocks(n), kThreads, 0,
                ctx.stream(), da, db, dout, n);
  return LaunchStatus("ResidualBackwardKernel");
}

}  // namespace strata::kernels::cuda
