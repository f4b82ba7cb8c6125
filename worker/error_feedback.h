// Error feedback for gradients pushed as bf16 (`--push_bf16`). Rounding a
// gradient to bf16 (8 significant bits) on its own drops every part of an
// element smaller than half its unit in the last place, and drops it again
// the next step: a persistent gradient of 1 + 2^-10 is pushed as 1 every
// step, a bias that never averages out. With error feedback each push
// carries the rounding error of the previous one for the same element, so
// such a part is delayed, not lost: the sum of what was pushed stays within
// one rounding of the sum of the gradients (EF-SGD: Karimireddy et al.
// 2019; 1-bit SGD: Seide et al. 2014).
#ifndef STRATA_WORKER_ERROR_FEEDBACK_H_
#define STRATA_WORKER_ERROR_FEEDBACK_H_

#include <cstdint>
#include <vector>

namespace strata {

class Bf16ErrorFeedback {
 public:
  // Replaces g[0..n), the gradient of parameter `param`, with g plus the
  // error carried for it, rounded to bf16 (to nearest even: so the client's
  // conversion to bf16 is exact), and carries the new rounding error. A
  // value that is not finite, or whose rounding is not, passes unchanged
  // and carries nothing (the servers refuse it; a NaN carried would poison
  // every later push). The first call
  // for a parameter, or one with another n, starts from no error.
  void Apply(int param, float* g, int64_t n);
  // Drops every carried error: the pushes it came from were not applied
  // (a step redone, a rollback).
  void Reset();

 private:
  std::vector<std::vector<float>> carried_;  // per parameter
};

}  // namespace strata

#endif  // STRATA_WORKER_ERROR_FEEDBACK_H_
