// Error feedback for gradients pushed as bf16 (PsClientOptions::
// push_error_feedback, the worker's `--error_feedback`). Rounding a
// gradient to bf16 (8 significant bits) on its own drops every part of an
// element smaller than half its unit in the last place, and drops it again
// the next step: a persistent gradient of 1 + 2^-10 is pushed as 1 every
// step, a bias that never averages out. With error feedback each push
// carries the rounding error of the previous push of the same values, so
// such a part is delayed, not lost: the sum of what was pushed stays within
// one rounding of the sum of the gradients (EF-SGD: Karimireddy et al.
// 2019; 1-bit SGD: Seide et al. 2014). The rounding and the carry are one
// pass over the gradient, the one that converts it for the wire.
#ifndef STRATA_CLIENT_ERROR_FEEDBACK_H_
#define STRATA_CLIENT_ERROR_FEEDBACK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace strata {

class Bf16ErrorFeedback {
 public:
  // Writes out[0..n) = bf16(g + e), rounded to nearest even, where e is the
  // error carried for `key` (a chunk), and carries g + e - out as the new
  // one. A value that is not finite, or whose rounding is not, is written
  // as plain bf16(g) and carries nothing (the servers refuse it; a NaN
  // carried would poison every later push). The first call for a key, or
  // one with another n, starts from no error. Calls for different keys may
  // run at once; calls for one key must not.
  void Encode(int key, const float* g, uint16_t* out, int64_t n);
  // Drops every carried error: the pushes it came from were not applied (a
  // step redone, a rollback). REQUIRES: no Encode under way.
  void Reset();

 private:
  // The error carried for `key`, sized n (zeroed when new or resized).
  float* Carried(int key, int64_t n);

  absl::Mutex mu_;
  std::vector<std::unique_ptr<std::vector<float>>> carried_
      ABSL_GUARDED_BY(mu_);  // per key
};

}  // namespace strata

#endif  // STRATA_CLIENT_ERROR_FEEDBACK_H_
