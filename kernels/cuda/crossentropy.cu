// Fused softmax cross-entropy launcher; the kernel (one block per row of
// logits) is in crossentropy_kernels.cuh. Rows that fit in the device's
// shared memory (a GPT-2 vocabulary's 50257 floats do on a Hopper) take the
// staged kernel, which reads the logits once instead of twice.
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
  const int64_t staged_bytes = StagedSharedBytes(V);
  if (staged_bytes <= ctx.max_shared_bytes()) {
    constexpr auto kernel = SoftmaxCrossEntropyKernel<kStagedThreads, true>;
    STRATA_CUDA_RETURN_IF_ERROR(CudaStatus(
        cudaFuncSetAttribute(kernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(staged_bytes)),
        "SoftmaxCrossEntropyKernel shared memory"));
    STRATA_LAUNCH(kernel, N, kStagedThreads, staged_bytes, ctx.stream(),
                  dlogits, losses, logits, targets, dloss, V, ld);
  } else {
    STRATA_LAUNCH((SoftmaxCrossEntropyKernel<kThreads, false>), N, kThreads,
                  kSharedBytes, ctx.stream(), dlogits, losses, logits, targets,
                  dloss, V, ld);
  }
  return LaunchStatus("SoftmaxCrossEntropyKernel");
}

}  // namespace strata::kernels::cuda
