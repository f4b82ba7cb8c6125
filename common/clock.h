// A clock interface so every part that waits, leases or times out can be
// driven by a simulated clock in tests.
#ifndef STRATA_COMMON_CLOCK_H_
#define STRATA_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace strata {

// Thread-safe source of the current time.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // The process-wide real clock (never destroyed).
  static Clock* Real();
};

// A clock that moves only when told to. Thread-safe.
class SimulatedClock : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_COMMON_CLOCK_H_
