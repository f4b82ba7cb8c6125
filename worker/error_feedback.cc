#include "worker/error_feedback.h"

#include <cmath>

#include "common/bf16.h"
#include "common/parallel.h"

namespace strata {

void Bf16ErrorFeedback::Apply(int param, float* g, int64_t n) {
  if (param >= static_cast<int>(carried_.size())) carried_.resize(param + 1);
  std::vector<float>& carried = carried_[param];
  if (static_cast<int64_t>(carried.size()) != n) carried.assign(n, 0.0f);
  float* e = carried.data();
  ParallelFor(n, int64_t{1} << 16, [&](int, int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const float want = g[k] + e[k];
      const float sent = Bf16ToFloat(FloatToBf16(want));
      if (!std::isfinite(sent)) {  // rounding of a huge value may overflow
        e[k] = 0.0f;               // g[k] stays as computed
        continue;
      }
      // Exact (Sterbenz: sent is within a factor of 2 of want).
      e[k] = want - sent;
      g[k] = sent;
    }
  });
}

void Bf16ErrorFeedback::Reset() { carried_.clear(); }

}  // namespace strata
