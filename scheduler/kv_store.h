// The scheduler's rendezvous key-value store: keys with revisions,
// compare-and-set and waits, for members to agree on shared values (the
// workers' collective groups rendezvous through it:
// collective/kv_rendezvous.h), and range deletes to forget old ones.
// Private to scheduler/.
#ifndef STRATA_SCHEDULER_KV_STORE_H_
#define STRATA_SCHEDULER_KV_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/kv_revision.h"
#include "scheduler/state_store.h"
#include "strata/v1/scheduler.pb.h"

namespace strata::scheduler_internal {

// What the rendezvous KV holds at most (a rendezvous needs a few keys of a
// few hundred bytes per member): every key is kept in the scheduler's
// memory and its RocksDB state.
inline constexpr size_t kMaxKvKeyBytes = 1024;
inline constexpr size_t kMaxKvValueBytes = 64 << 10;
inline constexpr size_t kMaxKvKeys = 65536;

// Keys with values and per-key revisions (1 on the first put, +1 on each
// later one). Thread-safe.
class KvStore {
 public:
  // `store` is not owned and must outlive this; `entries` is the stored KV.
  KvStore(StateStore* store, std::map<std::string, v1::KvGetResponse> entries);

  // Puts key=value, or with `cas` only if the key's revision equals
  // `expected_revision` (0: the key must not exist). Returns the new
  // revision. Errors: INVALID_ARGUMENT (empty key, or a key or value over
  // the limits above), RESOURCE_EXHAUSTED (a new key beyond kMaxKvKeys),
  // FAILED_PRECONDITION on a
  // CAS mismatch (with the current revision as kKvRevisionPayload and in the
  // message), a storage error (then nothing changed).
  absl::StatusOr<uint64_t> Put(const std::string& key, const std::string& value,
                               bool cas, uint64_t expected_revision);

  // Gets a key, waiting up to `wait` for it to appear. Errors:
  // INVALID_ARGUMENT (empty key); NOT_FOUND when absent and wait <= 0;
  // DEADLINE_EXCEEDED when it did not appear in time; CANCELLED after Close.
  absl::StatusOr<v1::KvGetResponse> Get(const std::string& key,
                                        absl::Duration wait) const;

  // Deletes the keys k with begin <= k < end; returns how many. A deleted
  // key that is put again starts at revision 1. Errors: a storage error
  // (then nothing changed).
  absl::StatusOr<uint64_t> DeleteRange(const std::string& begin,
                                       const std::string& end);

  // Ends every waiting Get (with CANCELLED) and all later waits.
  void Close();

 private:
  StateStore* const store_;
  mutable absl::Mutex mu_;
  std::map<std::string, v1::KvGetResponse> entries_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_KV_STORE_H_
