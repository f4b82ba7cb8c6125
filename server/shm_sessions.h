// The shared-memory regions co-located callers attached to this server
// (AttachShm in ps.proto): one session per member, found again by the id in
// each push's or pull's ShmRef, and fenced when it ends (DetachShm): each
// access to a session's bytes is a use that a detach waits for, and none
// starts after it.
#ifndef STRATA_SERVER_SHM_SESSIONS_H_
#define STRATA_SERVER_SHM_SESSIONS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shm_region.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Guards one session's bytes against the session's end. Thread-safe.
class ShmGate {
 public:
  // Starts a use: false once revoked (then nothing may touch the bytes).
  bool Enter();
  void Leave();
  bool Idle();  // no use under way
  // Refuses every later Enter and returns once the uses under way have
  // left, or at once with `wait` false.
  void Revoke(bool wait = true);

 private:
  absl::Mutex mu_;
  int uses_ ABSL_GUARDED_BY(mu_) = 0;
  bool revoked_ ABSL_GUARDED_BY(mu_) = false;
};

// Bytes a ShmRef names. `region` keeps them mapped even if the session is
// replaced or detached meanwhile; touch them only inside a ShmUse.
struct ShmSpan {
  std::shared_ptr<ShmRegion> region;
  std::shared_ptr<ShmGate> gate;
  char* data = nullptr;
  size_t size = 0;
  bool tensors = false;  // in the caller's tensor region
};

// One access to a span's bytes: from the first Begin that succeeds to End
// or the end of its scope. A detach of the session waits for it, so keep it
// short: around the copies, not around waits.
class ShmUse {
 public:
  explicit ShmUse(const ShmSpan& span) : gate_(span.gate.get()) {}
  ~ShmUse() { End(); }
  ShmUse(const ShmUse&) = delete;
  ShmUse& operator=(const ShmUse&) = delete;

  // Whether the bytes may be touched now (the use has begun); false once
  // the session was detached, and then NoSessionError says so.
  bool Begin();
  void End();
  bool refused() const { return refused_; }
  // The error of a request whose session ended before its use began (as
  // for a session this server does not hold: the client attaches again).
  static absl::Status NoSessionError(uint64_t session);

 private:
  ShmGate* gate_;
  bool in_ = false;
  bool refused_ = false;
};

// Thread-safe.
class ShmSessions {
 public:
  // Two per member at most (slots, tensors): 64 co-located members.
  explicit ShmSessions(size_t max_sessions = 128)
      : max_sessions_(max_sessions) {}

  // Maps the caller's region (ShmRegion::Open's errors) and returns its
  // session id, a random number. The caller must have checked that
  // req.member_id() is a live worker; one that RetainOnly has dropped since
  // is refused (UNAVAILABLE). A member holds one session of each
  // kind (req.tensors()): a new one replaces the old one of its kind, and
  // returns once the old one is ended as Detach ends it; RESOURCE_EXHAUSTED
  // when max_sessions others are held.
  absl::StatusOr<uint64_t> Attach(const v1::AttachShmRequest& req);
  // The bytes `ref` names in a request of `member`. NOT_FOUND for a session
  // this server does not hold for that member (it restarted, the member
  // attached again or left: attach again and retry); INVALID_ARGUMENT for a
  // range outside the region's payload bytes.
  absl::StatusOr<ShmSpan> Resolve(const v1::ShmRef& ref, uint64_t member) const;
  // Ends session `id` (DetachShm): returns once no access to its bytes is
  // under way and none can start, also when another detach of it is
  // waiting. False for a session not held (nor ended while an access was
  // under way).
  bool Detach(uint64_t id);
  // Drops the sessions of members not in `members` (sorted): they left.
  // Their uses under way finish; none starts after. Until the next call,
  // Attach refuses others (UNAVAILABLE).
  void RetainOnly(const std::vector<uint64_t>& members);
  size_t size() const;

 private:
  struct Session {
    uint64_t member = 0;
    bool tensors = false;
    std::shared_ptr<ShmRegion> region;
    std::shared_ptr<ShmGate> gate;
  };
  // Ends session `id` if held: revokes its gate, without waiting, and
  // moves it to ended_.
  void EndLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const size_t max_sessions_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  // (member, tensors) -> session.
  absl::flat_hash_map<std::pair<uint64_t, bool>, uint64_t> by_member_
      ABSL_GUARDED_BY(mu_);
  // The live workers RetainOnly last passed (sorted); unset before.
  std::optional<std::vector<uint64_t>> members_ ABSL_GUARDED_BY(mu_);
  // Ended sessions whose uses may be under way: a detach of one waits for
  // them. Detach removes the one it waited for; RetainOnly the idle ones.
  absl::flat_hash_map<uint64_t, std::shared_ptr<ShmGate>> ended_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_SHM_SESSIONS_H_
