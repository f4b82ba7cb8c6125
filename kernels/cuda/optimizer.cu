// Adam/AdamW on the device: one thread per element, the formula of
// kernels/adam_step.h, optionally writing the bf16 copy of the new weight.
#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride, so any n fits in a bounded grid.
__global__ void AdamKernel(float* w, bf16* w_bf16, float* m, float* v,
                           const float* g, int64_t n, AdamStep s) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += stride) {
    const float wi = w[i];
    const float gi = g[i] + s.l2 * wi;
    const float mi = s.b1 * m[i] + s.one_minus_b1 * gi;
    const float vi = s.b2 * v[i] + s.one_minus_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    const float wn = wi * s.decay -
                     (s.step_size * mi) / (sqrtf(vi) * s.inv_sqrt_bc2 + s.eps);
    w[i] = wn;
    if (w_bf16 != nullptr) w_bf16[i] = __float2bfloat16(wn);
  }
}

}  // namespace

absl::Status AdamUpdate(Context& ctx, float* w, bf16* w_bf16, float* m,
                        float* v, const float* g, int64_t n,
                        const AdamStep& step) {
  STRATA_CUDA_RETURN_IF_ERROR(Require(n >= 0, "AdamUpdate: n >= 0"));
  if (n == 0) return absl::OkStatus();
  // Enough blocks to fill any current GPU several times over; the loop
  // covers the rest.
  const int blocks = static_cast<int>(
      std::min<int64_t>(Blocks(n, kThreads), int64_t{132} * 16));
  AdamKernel<<<blocks, kThreads, 0, ctx.stream()>>>(w, w_bf16, m, v, g, n,
                                                    step);
  return LaunchStatus("AdamKernel");
}

}  // namespace strata::kernels::cuda
