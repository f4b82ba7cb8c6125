#include "server/shm_sessions.h"

#include <sys/random.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<uint64_t> ShmSessions::Attach(const v1::AttachShmRequest& req) {
  // Mapped before taking the lock: opening and mapping may take a while.
  absl::StatusOr<std::unique_ptr<ShmRegion>> region =
      ShmRegion::Open(req.pid(), req.fd(), req.size(), req.nonce());
  if (!region.ok()) return region.status();
  absl::MutexLock lock(&mu_);
  const std::pair<uint64_t, bool> key(req.member_id(), req.tensors());
  auto old = by_member_.find(key);
  if (old != by_member_.end()) {
    sessions_.erase(old->second);
    by_member_.erase(old);
  }
  if (sessions_.size() >= max_sessions_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this server already maps ", max_sessions_, " shared-memory regions"));
  }
  // Random: an id is no use to another member, nor after a restart.
  uint64_t id = 0;
  while (id == 0 || sessions_.contains(id)) {
    if (getrandom(&id, sizeof id, 0) != sizeof id) {
      return absl::UnavailableError("getrandom failed");
    }
  }
  sessions_[id] = Session{req.member_id(), std::move(*region)};
  by_member_[key] = id;
  return id;
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
  return ShmSpan{it->second.region, r.data() + ref.offset(),
                 static_cast<size_t>(ref.size())};
}

void ShmSessions::RetainOnly(const std::vector<uint64_t>& members) {
  absl::MutexLock lock(&mu_);
  for (auto it = by_member_.begin(); it != by_member_.end();) {
    if (std::binary_search(members.begin(), members.end(), it->first.first)) {
      ++it;
      continue;
    }
    sessions_.erase(it->second);
    by_member_.erase(it++);
  }
}

size_t ShmSessions::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace strata
