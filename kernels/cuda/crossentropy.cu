// Fused softmax cross-entropy launcher; the kernel (one block per row of
// logits) is in crossentropy_kernels.cuh.
#include "kernels/cuda/crossentropy_kernels.cuh"

namespace strata::kernels::cuda {

using namespace crossentropy;  // NOLINT: this file launches it

absl::Status SoftmaxCrossEntropyFused(Context& ctx, bf16* dlogits,
                                      float* losses, const float* logits,
                                      const int32_t* targets, float dloss,
                                      int N, int V, int ld) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(N > 0 && V > 0, "SoftmaxCrossEntropy: N, V > 0"));
  STRATA_CUDA_RETURN_IF_ERROR(Require(ld >= V, "SoftmaxCrossEntropy: ld >= V"));
  STRATA_LAUNCH(SoftmaxCrossEntropyKernel, N, kThreads, kSharedBytes,
                ctx.stream(), dlogits, losses, logits, targets, dloss, V, ld);
  return LaunchStatus("SoftmaxCrossEntropyKernel");
}

}  // namespace strata::kernels::cuda
