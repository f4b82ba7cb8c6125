#include "kernels/gelu.h"

#include "common/parallel.h"
#include "kernels/vec_math.h"

namespace strata::kernels {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr int64_t kGrain = 1 << 14;

// The loops live outside the ParallelFor lambdas: GCC does not vectorize
// them through the lambda's captured pointers.
void GeluForwardRange(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    out[i] = 0.5f * x * (1.0f + VecTanh(u));
  }
}

void GeluBackwardRange(float* dinp, const float* inp, const float* dout,
                       int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float t = VecTanh(u);
    const float sech2 = 1.0f - t * t;
    const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = (0.5f * (1.0f + t) + 0.5f * x * sech2 * du) * dout[i];
  }
}

}  // namespace

void GeluForward(float* out, const float* inp, int64_t n) {
  ParallelFor(n, kGrain, [&](int, int64_t i0, int64_t i1) {
    GeluForwardRange(out + i0, inp + i0, i1 - i0);
  });
}

void GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n) {
  ParallelFor(n, kGrain, [&](int, int64_t i0, int64_t i1) {
    GeluBackwardRange(dinp + i0, inp + i0, dout + i0, i1 - i0);
  });
}

}  // namespace strata::kernels
