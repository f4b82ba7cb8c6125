// LayerNorm launchers; the kernels are in layernorm_kernels.cuh.
#include "kernels/cuda/layernorm_kernels.cuh"

namespace strata::kernels::cuda {

using namespace layernorm;  // NOLINT: this file launches them

absl::Status LayerNormForward(Context& ctx, bf16* out, float* mean, float* rstd,
                              const bf16* inp, const bf16* weight,
                              const bf16* bias, int N, int C) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(N > 0 && C > 0, "LayerNorm: N, C > 0"));
  STRATA_LAUNCH(LayerNormForwardKernel, Blocks(N, kWarpsPerBlock), kThreads, 0,
                ctx.stream(), out, mean, rstd, inp, weight, bias, N, C);
  return LaunchStatus("LayerNormForwardKernel");
}

absl::Status LayerNormBackward(Context& ctx, bf16* dinp, float* dweight,
                               float* dbias, const bf16* dout, const bf16* inp,
                               const bf16* weight, const float* mean,
                               const float* rstd, int N, int C) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(N > 0 && C > 0 && C <= 16384,
                                      "LayerNorm: N > 0, 0 < C <= 16384"));
  if (Vectorizable(C, {dinp, dout, inp, weight})) {
    STRATA_LAUNCH(LayerNormBackwardKernel<8>, Blocks(N, kWarpsPerBlock),
                  kThreads, 0, ctx.stream(), dinp, dout, inp, weight, mean,
                  rstd, N, C);
  } else {
    STRATA_LAUNCH(LayerNormBackwardKernel<1>, Blocks(N, kWarpsPerBlock),
                  kThreads, 0, ctx.stream(), dinp, dout, inp, weight, mean,
                  rstd, N, C);
  }
  STRATA_CUDA_RETURN_IF_ERROR(LaunchStatus("LayerNormBackwardKernel"));
  STRATA_LAUNCH(LayerNormParamGradKernel, ParamGradGrid(N, C), ParamGradBlock(),
                kParamGradSharedBytes, ctx.stream(), dweight, dbias, dout, inp,
                mean, rstd, N, C);
  return LaunchStatus("LayerNormParamGradKernel");
}

}  // namespace strata::kernels::cuda
