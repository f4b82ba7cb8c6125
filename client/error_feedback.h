// Error feedback for gradients pushed as bf16 (PsClientOptions::
// push_error_feedback, the worker's `--error_feedback`), and for
// compressed pushes (CompressedErrorFeedback, below). Rounding a
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
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// The error carried per key (a chunk), for one kind of encoding.
// Thread-safe; calls for different keys may run at once.
class CarriedErrors {
 public:
  // Key's error, sized n (zeroed when new or resized). The pointer stays
  // valid until Reset or a call for the key with another n.
  float* Get(int key, int64_t n);
  // A copy of key's error (empty: none).
  std::vector<float> Copy(int key);
  void Reset();
  // Zeroes key's error, where there is one.
  void Reset(int key);

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<std::vector<float>>> carried_
      ABSL_GUARDED_BY(mu_);  // per key
};

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
  void Reset() { carried_.Reset(); }

 private:
  CarriedErrors carried_;
};

// Error feedback for compressed pushes (PsClientOptions::push_compress:
// ONEBIT or TOPK, common/compress.h). Each push sends C(g + e) and carries
// e' = g + e - D(C(g + e)), what the server's decoding D leaves out, to
// the chunk's next push: the sum of what was decoded plus the carried
// error equals the sum of the gradients up to the float rounding of those
// additions (1-bit SGD, Seide et al. 2014; EF-SGD, Karimireddy et al.
// 2019; DGC's residual accumulation, Lin et al. 2018). A gradient that is
// not all finite is encoded alone (the server refuses it) and the chunk's
// error is dropped.
//
// With a momentum (TOPK only: DGC's momentum correction, Lin et al. 2018)
// the worker keeps the momentum, u = momentum * u + g, and what it
// compresses with error feedback is u (the carried error is then DGC's
// accumulated velocity); the elements sent have their u zeroed (momentum
// factor masking), so a stale momentum does not push them again. The
// servers then apply what arrives without a momentum of their own.
class CompressedErrorFeedback {
 public:
  // `dtype`: DTYPE_ONEBIT or DTYPE_TOPK; `ratio`: TOPK's kept fraction;
  // `momentum` in [0, 1) (0: none; REQUIRES: 0 for ONEBIT).
  CompressedErrorFeedback(v1::DType dtype, double ratio, double momentum = 0)
      : dtype_(dtype), ratio_(ratio), momentum_(static_cast<float>(momentum)) {}
  v1::DType dtype() const { return dtype_; }
  // Writes the encoding of key's g + e (n elements) into *out. Calls for
  // one key must not overlap.
  void Encode(int key, const float* g, int64_t n, std::string* out);
  // As Bf16ErrorFeedback::Reset; the momentum goes too.
  void Reset() {
    carried_.Reset();
    velocity_.Reset();
  }
  // The error carried for `key` now (empty: none), and the momentum kept,
  // for tests.
  std::vector<float> Carried(int key) { return carried_.Copy(key); }
  std::vector<float> Momentum(int key) { return velocity_.Copy(key); }

 private:
  // u = momentum * u + g for key's n elements, into *out.
  void Accumulate(int key, const float* g, size_t n, std::vector<float>* out);

  const v1::DType dtype_;
  const double ratio_;
  const float momentum_;
  CarriedErrors carried_;
  CarriedErrors velocity_;  // with a momentum: u
};

}  // namespace strata

#endif  // STRATA_CLIENT_ERROR_FEEDBACK_H_
