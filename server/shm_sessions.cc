#include "server/shm_sessions.h"

#include <sys/random.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace strata {

bool ShmGate::Enter() {
  absl::MutexLock lock(&mu_);
  if (revoked_) return false;
  ++uses_;
  return true;
}

void ShmGate::Leave() {
  absl::MutexLock lock(&mu_);
  --uses_;
}

bool ShmGate::Idle() {
  absl::MutexLock lock(&mu_);
  return uses_ == 0;
}

void ShmGate::Revoke(bool wait) {
  absl::MutexLock lock(&mu_);
  revoked_ = true;
  if (wait)
    mu_.Await(absl::Condition(
        +[](int* uses) { return *uses == 0; }, &uses_));
}

bool ShmUse::Begin() {
  if (in_) return true;
  if (refused_) return false;
  in_ = gate_->Enter();
  refused_ = !in_;
  return in_;
}

void ShmUse::End() {
  if (!in_) return;
  in_ = false;
  gate_->Leave();
}

absl::Status ShmUse::NoSessionError(uint64_t session) {
  return absl::NotFoundError(
      absl::StrCat(kNoSessionPrefix, " ", session,
                   " on this server: it was detached; attach again"));
}

absl::StatusOr<uint64_t> ShmSessions::Attach(const v1::AttachShmRequest& req) {
  // Mapped before taking the lock: opening and mapping may take a while.
  absl::StatusOr<std::unique_ptr<ShmRegion>> region =
      ShmRegion::Open(req.pid(), req.fd(), req.size(), req.nonce());
  if (!region.ok()) return region.status();
  const std::pair<uint64_t, bool> key(req.member_id(), req.tensors());
  uint64_t replaced = 0;
  absl::StatusOr<uint64_t> id = [&]() -> absl::StatusOr<uint64_t> {
    absl::MutexLock lock(&mu_);
    if (members_.has_value() &&
        !std::binary_search(members_->begin(), members_->end(),
                            req.member_id())) {
      // It left after the caller's check: a session now would stay mapped
      // until the next view change. (A member that has just joined is
      // here before the shard's view has it: server/parameter_server.cc
      // passes each view here first.)
      return absl::UnavailableError(absl::StrCat(
          "member ", req.member_id(),
          " is not among the live workers this server's sessions know; "
          "retry"));
    }
    auto old = by_member_.find(key);
    if (old != by_member_.end()) {
      replaced = old->second;
      EndLocked(replaced);
    }
    if (sessions_.size() >= max_sessions_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("this server already maps ", max_sessions_,
                       " shared-memory regions"));
    }
    // Random: an id is no use to another member, nor after a restart.
    uint64_t id = 0;
    while (id == 0 || sessions_.contains(id)) {
      if (getrandom(&id, sizeof id, 0) != sizeof id) {
        return absl::UnavailableError("getrandom failed");
      }
    }
    sessions_[id] = Session{req.member_id(), req.tensors(), std::move(*region),
                            std::make_shared<ShmGate>()};
    by_member_[key] = id;
    return id;
  }();
  // The new session replaces the old one as a detach would: once the
  // caller has the answer, the old one's bytes are no longer touched.
  if (replaced != 0) Detach(replaced);
  return id;
}

void ShmSessions::EndLocked(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  it->second.gate->Revoke(/*wait=*/false);
  ended_[id] = std::move(it->second.gate);
  by_member_.erase({it->second.member, it->second.tensors});
  sessions_.erase(it);
}

bool ShmSessions::Detach(uint64_t id) {
  std::shared_ptr<ShmGate> gate;
  {
    absl::MutexLock lock(&mu_);
    EndLocked(id);
    auto it = ended_.find(id);
    if (it == ended_.end()) return false;
    // It stays findable until its uses are over, so a second detach
    // meanwhile (a client's retry) waits for them too.
    gate = it->second;
  }
  gate->Revoke();  // outside the lock: other sessions' requests go on
  absl::MutexLock lock(&mu_);
  auto it = ended_.find(id);
  if (it != ended_.end() && it->second == gate) ended_.erase(it);
  return true;
}

absl::StatusOr<ShmSpan> ShmSessions::Resolve(const v1::ShmRef& ref,
                                             uint64_t member) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(ref.session());
  if (it == sessions_.end() || it->second.member != member) {
    return absl::NotFoundError(
        absl::StrCat(kNoSessionPrefix, " ", ref.session(), " of member ",
                     member, " on this server; attach again"));
  }
  const ShmRegion& r = *it->second.region;
  if (ref.offset() < ShmRegion::kHeaderBytes ||
      !r.Contains(ref.offset(), ref.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory range [", ref.offset(), ", +", ref.size(),
                     ") lies outside the region's payload bytes [",
                     ShmRegion::kHeaderBytes, ", ", r.size(), ")"));
  }
  return ShmSpan{it->second.region, it->second.gate, r.data() + ref.offset(),
                 static_cast<size_t>(ref.size()), it->second.tensors};
}

void ShmSessions::RetainOnly(const std::vector<uint64_t>& members) {
  absl::MutexLock lock(&mu_);
  members_ = members;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (std::binary_search(members.begin(), members.end(), it->second.member)) {
      ++it;
      continue;
    }
    // Not waited for here, on the view's path under the server's view
    // lock; a detach of the session still waits for its uses.
    EndLocked((it++)->first);
  }
  // A revoked gate with no use under way never has one again.
  absl::erase_if(ended_, [](const auto& kv) { return kv.second->Idle(); });
}

size_t ShmSessions::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace strata
