// The shared-memory regions co-located callers attached to this server
// (AttachShm in ps.proto): one session per member, found again by the id in
// each push's or pull's ShmRef.
#ifndef STRATA_SERVER_SHM_SESSIONS_H_
#define STRATA_SERVER_SHM_SESSIONS_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shm_region.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Bytes a ShmRef names. `region` keeps them mapped while the caller uses
// them, even if the session is replaced meanwhile.
struct ShmSpan {
  std::shared_ptr<ShmRegion> region;
  char* data = nullptr;
  size_t size = 0;
};

// Thread-safe.
class ShmSessions {
 public:
  // Two per member at most (slots, tensors): 64 co-located members.
  explicit ShmSessions(size_t max_sessions = 128)
      : max_sessions_(max_sessions) {}

  // Maps the caller's region (ShmRegion::Open's errors) and returns its
  // session id, a random number. The caller must have checked that
  // req.member_id() is a live worker. A member holds one session of each
  // kind (req.tensors()): a new one replaces the old one of its kind;
  // RESOURCE_EXHAUSTED when max_sessions others are held.
  absl::StatusOr<uint64_t> Attach(const v1::AttachShmRequest& req);
  // The bytes `ref` names in a request of `member`. NOT_FOUND for a session
  // this server does not hold for that member (it restarted, the member
  // attached again or left: attach again and retry); INVALID_ARGUMENT for a
  // range outside the region's payload bytes.
  absl::StatusOr<ShmSpan> Resolve(const v1::ShmRef& ref, uint64_t member) const;
  // Drops the sessions of members not in `members` (sorted): they left.
  void RetainOnly(const std::vector<uint64_t>& members);
  size_t size() const;

 private:
  struct Session {
    uint64_t member = 0;
    std::shared_ptr<ShmRegion> region;
  };
  const size_t max_sessions_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  // (member, tensors) -> session.
  absl::flat_hash_map<std::pair<uint64_t, bool>, uint64_t> by_member_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_SHM_SESSIONS_H_
