// The cap on pulls waiting at a shard's consistency gate at once, per
// requester (ShardOptions::max_waiting_pulls_per_worker and _others): a
// waiting pull holds a handler thread, and these keep a few requesters
// from holding them all.
#ifndef STRATA_SERVER_PULL_LIMITER_H_
#define STRATA_SERVER_PULL_LIMITER_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace strata {

// Thread-safe.
class PullLimiter {
 public:
  PullLimiter(int per_worker, int others)
      : per_worker_(per_worker), others_(others) {}

  // A pull of `chunk` by `member` (a live worker, or not: all non-workers
  // share one cap) starts waiting; RESOURCE_EXHAUSTED when its requester
  // has its cap waiting already. Each OK is matched by a Leave.
  absl::Status Enter(uint64_t member, bool worker, uint64_t chunk) {
    const uint64_t key = worker ? member : 0;
    const int cap = worker ? per_worker_ : others_;
    absl::MutexLock lock(&mu_);
    int& n = waiting_[key];
    if (n >= cap) {
      if (n == 0) waiting_.erase(key);
      return absl::ResourceExhaustedError(
          absl::StrCat("pull of chunk ", chunk, ": ", cap, " pulls of ",
                       worker ? absl::StrCat("worker ", member) : "non-workers",
                       " wait at the gate already"));
    }
    ++n;
    return absl::OkStatus();
  }
  void Leave(uint64_t member, bool worker) {
    const uint64_t key = worker ? member : 0;
    absl::MutexLock lock(&mu_);
    if (--waiting_[key] == 0) waiting_.erase(key);
  }

 private:
  const int per_worker_;
  const int others_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, int> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_PULL_LIMITER_H_
