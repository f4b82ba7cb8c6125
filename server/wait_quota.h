// Caps on requests waiting at once, per key and in all. A waiting request
// holds a handler thread: the shard's caps keep a few requesters (or a
// flood of strangers) from holding them all. Used for pulls waiting at the
// consistency gate (per worker) and for requests waiting for a view the
// shard has not reached (per member).
#ifndef STRATA_SERVER_WAIT_QUOTA_H_
#define STRATA_SERVER_WAIT_QUOTA_H_

#include <climits>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace strata {

// Thread-safe; its lock is a leaf (taken under others, never the reverse).
class WaitQuota {
 public:
  // What Enter found full, if anything.
  enum class Full { kNo, kKey, kAll };

  explicit WaitQuota(int total_cap = INT_MAX) : total_cap_(total_cap) {}

  // Takes a place for `key` unless `key_cap` of its requests, or the total
  // cap of all, wait already. Each kNo is matched by a Leave(key).
  Full Enter(uint64_t key, int key_cap) {
    absl::MutexLock lock(&mu_);
    auto it = waiting_.find(key);
    const int mine = it == waiting_.end() ? 0 : it->second;
    if (mine >= key_cap) return Full::kKey;
    if (total_ >= total_cap_) return Full::kAll;
    ++waiting_[key];
    ++total_;
    return Full::kNo;
  }
  void Leave(uint64_t key) {
    absl::MutexLock lock(&mu_);
    --total_;
    if (--waiting_[key] == 0) waiting_.erase(key);
  }

 private:
  const int total_cap_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, int> waiting_ ABSL_GUARDED_BY(mu_);
  int total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_SERVER_WAIT_QUOTA_H_
