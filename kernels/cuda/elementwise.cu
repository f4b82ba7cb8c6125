// Encoder, GELU and residual launchers (with the fused bias forms); the
// kernels are in elementwise_kernels.cuh.
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
  if (Vectorizable(n, {out, inp})) {
    STRATA_LAUNCH(GeluForwardKernel<8>, ElementBlocks(n / 8), kThreads, 0,
                  ctx.stream(), out, inp, n);
  } else {
    STRATA_LAUNCH(GeluForwardKernel<1>, ElementBlocks(n), kThreads, 0,
                  ctx.stream(), out, inp, n);
  }
  return LaunchStatus("GeluForwardKernel");
}

absl::Status GeluBackward(Context& ctx, bf16* dinp, const bf16* inp,
                          const bf16* dout, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(n >= 0, "GeluBackward: n >= 0"));
  if (n == 0) return absl::OkStatus();
  if (Vectorizable(n, {dinp, inp, dout})) {
    STRATA_LAUNCH(GeluBackwardKernel<8>, ElementBlocks(n / 8), kThreads, 0,
                  ctx.stream(), dinp, inp, dout, n);
  } else {
    STRATA_LAUNCH(GeluBackwardKernel<1>, ElementBlocks(n), kThreads, 0,
                  ctx.stream(), dinp, inp, dout, n);
  }
  return LaunchStatus("GeluBackwardKernel");
}

absl::Status BiasGeluForward(Context& ctx, bf16* out, bf16* pre,
                             const bf16* bias, int N, int OC) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(N > 0 && OC > 0, "BiasGeluForward: N, OC > 0"));
  const int64_t n = int64_t{N} * OC;
  if (Vectorizable(OC, {out, pre, bias})) {
    STRATA_LAUNCH(BiasGeluForwardKernel<8>, ElementBlocks(n / 8), kThreads, 0,
                  ctx.stream(), out, pre, bias, n, OC);
  } else {
    STRATA_LAUNCH(BiasGeluForwardKernel<1>, ElementBlocks(n), kThreads, 0,
                  ctx.stream(), out, pre, bias, n, OC);
  }
  return LaunchStatus("BiasGeluForwardKernel");
}

absl::Status ResidualForward(Context& ctx, bf16* out, const bf16* a,
                             const bf16* b, int64_t n) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(n >= 0, "ResidualForward: n >= 0"));
  if (n == 0) return absl::OkStatus();
  if (Vectorizable(n, {out, a, b})) {
    STRATA_LAUNCH(ResidualForwardKernel<8>, ElementBlocks(n / 8), kThreads, 0,
                  ctx.stream(), out, a, b, nullptr, n, 1);
  } else {
    STRATA_LAUNCH(ResidualForwardKernel<1>, ElementBlocks(n), kThreads, 0,
                  ctx.stream(), out, a, b, nullptr, n, 1);
  }
  return LaunchStatus("ResidualForwardKernel");
}

absl::Status BiasResidualForward(Context& ctx, bf16* out, const bf16* a,
                                 const bf16* b, const bf16* bias, int N,
                                 int OC) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(N > 0 && OC > 0, "BiasResidualForward: N, OC > 0"));
  const int64_t n = int64_t{N} * OC;
  if (Vectorizable(OC, {out, a, b, bias})) {
    STRATA_LAUNCH(ResidualForwardKernel<8>, ElementBlocks(n / 8), kThreads, 0,
                  ctx.stream(), out, a, b, bias, n, OC);
  } else {
    STRATA_LAUNCH(ResidualForwardKernel<1>, ElementBlocks(n), kThreads, 0,
                  ctx.stream(), out, a, b, bias, n, OC);
  }
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
