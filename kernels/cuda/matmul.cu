// Fully connected layer: cuBLAS bf16 GEMMs with fp32 compute, plus the bias
// kernels of matmul_kernels.cuh.
#include "kernels/cuda/matmul_kernels.cuh"

namespace strata::kernels::cuda {
namespace {

using namespace matmul;  // NOLINT: this file launches them

absl::Status CheckShape(int N, int C, int OC) {
  return Require(N > 0 && C > 0 && OC > 0, "Matmul: N, C, OC > 0");
}

}  // namespace

absl::Status MatmulForward(Context& ctx, bf16* out, const bf16* inp,
                           const bf16* weight, const bf16* bias, int N, int C,
                           int OC) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckShape(N, C, OC));
  STRATA_CUDA_RETURN_IF_ERROR(GemmBatched(ctx, false, true, N, OC, C, 1.0f, inp,
                                          C, 0, weight, C, 0, 0.0f, out,
                                          CUDA_R_16BF, OC, 0, 1));
  if (bias == nullptr) return absl::OkStatus();
  const int64_t n = int64_t{N} * OC;
  if (Vectorizable(OC, {out, bias})) {
    STRATA_LAUNCH(AddBiasKernel<8>, Blocks(n / 8, kThreads), kThreads, 0,
                  ctx.stream(), out, bias, N, OC);
  } else {
    STRATA_LAUNCH(AddBiasKernel<1>, Blocks(n, kThreads), kThreads, 0,
                  ctx.stream(), out, bias, N, OC);
  }
  return LaunchStatus("AddBiasKernel");
}

absl::Status MatmulBackward(Context& ctx, bf16* dinp, float* dweight,
                            float* dbias, const bf16* dout, const bf16* inp,
                            const bf16* weight, int N, int C, int OC) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckShape(N, C, OC));
  if (dinp != nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(GemmBatched(ctx, false, false, N, C, OC, 1.0f,
                                            dout, OC, 0, weight, C, 0, 0.0f,
                                            dinp, CUDA_R_16BF, C, 0, 1));
  }
  STRATA_CUDA_RETURN_IF_ERROR(GemmBatched(ctx, true, false, OC, C, N, 1.0f,
                                          dout, OC, 0, inp, C, 0, 1.0f, dweight,
                                          CUDA_R_32F, C, 0, 1));
  if (dbias == nullptr) return absl::OkStatus();
  STRATA_LAUNCH(BiasBackwardKernel, BiasBackwardGrid(N, OC),
                BiasBackwardBlock(), kBiasBackwardSharedBytes, ctx.stream(),
                dbias, dout, N, OC);
  return LaunchStatus("BiasBackwardKernel");
}

}  // namespace strata::kernels::cuda
