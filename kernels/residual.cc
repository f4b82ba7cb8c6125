#include "kernels/residual.h"

#include "common/parallel.h"

namespace strata::kernels {
namespace {

constexpr int64_t kGrain = 1 << 15;

}  // namespace

void ResidualForward(float* out, const float* a, const float* b, int64_t n) {
  ParallelFor(n, kGrain, [&](int, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

void ResidualBackward(float* da, float* db, const float* dout, int64_t n) {
  ParallelFor(n, kGrain, [&](int, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      da[i] += dout[i];
      db[i] += dout[i];
    }
  });
}

}  // namespace strata::kernels
