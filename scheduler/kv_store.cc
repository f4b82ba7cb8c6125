#include "scheduler/kv_store.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace strata::scheduler_internal {

KvStore::KvStore(StateStore* store,
                 std::map<std::string, v1::KvGetResponse> entries)
    : store_(store), entries_(std::move(entries)) {}

absl::StatusOr<uint64_t> KvStore::Put(const std::string& key,
                                      const std::string& value, bool cas,
                                      uint64_t expected_revision) {
  if (key.empty()) return absl::InvalidArgumentError("kv put: empty key");
  if (key.size() > kMaxKvKeyBytes || value.size() > kMaxKvValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv put: a key holds at most ", kMaxKvKeyBytes, " bytes and a value ",
        kMaxKvValueBytes, "; got ", key.size(), " and ", value.size()));
  }
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() && entries_.size() >= kMaxKvKeys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv put: the store holds ", kMaxKvKeys, " keys already"));
  }
  const uint64_t current = it == entries_.end() ? 0 : it->second.revision();
  if (cas && current != expected_revision) {
    return WithKvRevision(
        absl::FailedPreconditionError(absl::StrCat(
            "kv compare-and-set on '", key, "': expected revision ",
            expected_revision, ", current revision ", current)),
        current);
  }
  v1::KvGetResponse entry;
  entry.set_value(value);
  entry.set_revision(current + 1);
  StateBatch batch;
  batch.PutKv(key, entry);
  STRATA_RETURN_IF_ERROR(store_->Write(batch));
  entries_[key] = std::move(entry);
  return current + 1;
}

absl::StatusOr<v1::KvGetResponse> KvStore::Get(const std::string& key,
                                               absl::Duration wait) const {
  if (key.empty()) return absl::InvalidArgumentError("kv get: empty key");
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return closed_ || entries_.contains(key);
  };
  if (wait > absl::ZeroDuration()) {
    mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
  }
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;
  if (closed_) return absl::CancelledError("kv get: scheduler shutting down");
  if (wait > absl::ZeroDuration()) {
    return absl::DeadlineExceededError(
        absl::StrCat("kv get: key '", key, "' did not appear within ",
                     absl::FormatDuration(wait)));
  }
  return absl::NotFoundError(absl::StrCat("kv get: no key '", key, "'"));
}

absl::StatusOr<uint64_t> KvStore::DeleteRange(const std::string& begin,
                                              const std::string& end) {
  absl::MutexLock lock(&mu_);
  if (end <= begin) return 0;
  auto first = entries_.lower_bound(begin), last = entries_.lower_bound(end);
  StateBatch batch;
  uint64_t n = 0;
  for (auto it = first; it != last; ++it, ++n) batch.DeleteKv(it->first);
  if (n == 0) return 0;
  STRATA_RETURN_IF_ERROR(store_->Write(batch));
  entries_.erase(first, last);
  return n;
}

void KvStore::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace strata::scheduler_internal
