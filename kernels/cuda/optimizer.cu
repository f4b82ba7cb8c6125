// Adam/AdamW on the device: one thread per element, the formula of
// optim/adam_step.h, optionally writing the bf16 copy of the new weight.
// The kernel is in optimizer_kernels.cuh.
#include "kernels/cuda/optimizer_kernels.cuh"

namespace strata::kernels::cuda {

using namespace optimizer;  // NOLINT: this file launches it

absl::Status AdamUpdate(Context& ctx, float* w, bf16* w_bf16, float* m,
                        float* v, const float* g, int64_t n,
                        const AdamStep& step) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(n >= 0, "AdamUpdate: n >= 0"));
  if (n == 0) return absl::OkStatus();
  STRATA_LAUNCH(AdamKernel, AdamBlocks(n), kThreads, 0, ctx.stream(), w, w_bf16,
                m, v, g, n, step);
  return LaunchStatus("AdamKernel");
}

absl::Status AdamUpdateSpans(Context& ctx, float* w, bf16* w_bf16, float* m,
                             float* v, const float* g, const int64_t* starts,
                             const uint8_t* kinds, int spans, int64_t n,
                             const AdamStep& step0, const AdamStep& step1) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(spans > 0 && n >= 0, "AdamUpdateSpans: spans > 0, n >= 0"));
  if (n == 0) return absl::OkStatus();
  const int blocks = static_cast<int>(
      std::min<int64_t>((n + kSpanTile - 1) / kSpanTile, int64_t{132} * 16));
  STRATA_LAUNCH(AdamSpansKernel, blocks, kThreads, 0, ctx.stream(), w, w_bf16,
                m, v, g, starts, kinds, spans, n, step0, step1);
  return LaunchStatus("AdamSpansKernel");
}

}  // namespace strata::kernels::cuda
