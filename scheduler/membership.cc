#include "scheduler/membership.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace strata::scheduler_internal {
namespace {

bool InView(v1::Role role) { return role != v1::ROLE_CLIENT; }

struct Counters {
  uint64_t epoch;
  uint64_t workers_epoch;
  uint64_t next_member_id;
  uint64_t shard_map_version;
};

void PutCounters(const Counters& c, StateBatch& batch) {
  batch.PutMeta("epoch", c.epoch);
  batch.PutMeta("workers_epoch", c.workers_epoch);
  batch.PutMeta("next_member_id", c.next_member_id);
  batch.PutMeta("shard_map_version", c.shard_map_version);
}

}  // namespace

Membership::Membership(MembershipOptions options, const PersistedState& state)
    : options_(std::move(options)),
      // Epoch 0 means "no view yet" to watchers, so the first view is 1.
      epoch_(std::max<uint64_t>(state.epoch, 1)),
      workers_epoch_(state.workers_epoch),
      next_member_id_(std::max<uint64_t>(state.next_member_id, 1)),
      shard_map_version_(state.shard_map_version) {
  STRATA_CHECK(options_.clock != nullptr && options_.store != nullptr);
  STRATA_CHECK(options_.num_shards > 0);
  const absl::Time lease_end = options_.clock->Now() + options_.lease;
  absl::MutexLock lock(&mu_);
  for (const v1::Member& m : state.members) {
    members_[m.id()] = Entry{m, lease_end};
  }
  RebuildViewLocked();
}

int64_t Membership::LeaseMs() const {
  return absl::ToInt64Milliseconds(options_.lease);
}

absl::Status Membership::ValidateRegister(
    const v1::RegisterRequest& req) const {
  if (req.role() != v1::ROLE_SERVER && req.role() != v1::ROLE_WORKER &&
      req.role() != v1::ROLE_CLIENT) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: unknown role ", req.role(),
                     " (want server, worker or client)"));
  }
  if (!std::isfinite(req.capacity()) || req.capacity() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: capacity must be a finite number >= 0, got ",
                     req.capacity()));
  }
  const bool first = req.worker() == 0 && req.incarnation() == 0;
  if (!first && (req.worker() == 0 || req.worker() >= next_member_id_ ||
                 req.incarnation() < 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register: worker ", req.worker(), " incarnation ", req.incarnation(),
        " is not a member registering again (want an earlier member id and "
        "an incarnation >= 2, or both 0)"));
  }
  if (req.role() != v1::ROLE_SERVER) return absl::OkStatus();
  if (req.shard() < 0 || req.shard() >= options_.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: server shard ", req.shard(), " is outside [0, ",
                     options_.num_shards, ")"));
  }
  if (req.address().empty()) {
    return absl::InvalidArgumentError(
        "register: a server must give the address it serves on");
  }
  for (const auto& [id, e] : members_) {
    if (e.member.role() == v1::ROLE_SERVER && e.member.shard() == req.shard()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "register: shard slot ", req.shard(), " is already served by member ",
          id, " at ", e.member.address()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterResponse> Membership::Register(
    const v1::RegisterRequest& req) {
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);  // a slot whose server ran out may be taken again
  STRATA_RETURN_IF_ERROR(ValidateRegister(req));
  Counters c{epoch_, workers_epoch_, next_member_id_ + 1, shard_map_version_};
  if (InView(req.role())) ++c.epoch;
  if (req.role() == v1::ROLE_WORKER) c.workers_epoch = c.epoch;
  if (req.role() == v1::ROLE_SERVER) ++c.shard_map_version;

  v1::Member m;
  m.set_id(next_member_id_);
  m.set_role(req.role());
  m.set_address(req.address());
  m.set_devices(req.devices());
  m.set_capacity(req.capacity() == 0 ? 1.0 : req.capacity());
  m.set_shard(req.role() == v1::ROLE_SERVER ? req.shard() : -1);
  m.set_joined_epoch(c.epoch);
  m.set_worker(req.worker() == 0 ? m.id() : req.worker());
  m.set_incarnation(req.incarnation() == 0 ? 1 : req.incarnation());

  // Store first, so a storage error leaves the table as it was.
  StateBatch batch;
  batch.PutMember(m);
  PutCounters(c, batch);
  STRATA_RETURN_IF_ERROR(options_.store->Write(batch));

  epoch_ = c.epoch;
  workers_epoch_ = c.workers_epoch;
  next_member_id_ = c.next_member_id;
  shard_map_version_ = c.shard_map_version;
  members_[m.id()] = Entry{m, now + options_.lease};
  RebuildViewLocked();
  spdlog::info("scheduler: member {} joined (role {}, address '{}'), epoch {}",
               m.id(), v1::Role_Name(m.role()), m.address(), epoch_);

  v1::RegisterResponse resp;
  resp.set_member_id(m.id());
  resp.set_lease_ms(LeaseMs());
  *resp.mutable_view() = view_;
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> Membership::Heartbeat(
    const v1::HeartbeatRequest& req) {
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  auto it = members_.find(req.member_id());
  if (it != members_.end() && it->second.lease_end <= now) {
    RemoveLocked({req.member_id()});  // ran out before the lease check did
    it = members_.end();
  }
  if (it == members_.end()) {
    return absl::NotFoundError(
        absl::StrCat("heartbeat: member ", req.member_id(),
                     " is unknown or its lease ran out; register again"));
  }
  Entry& e = it->second;
  e.lease_end = now + options_.lease;
  e.member.set_clock(req.clock());
  e.member.set_samples_per_sec(req.samples_per_sec());
  if (InView(e.member.role())) RebuildViewLocked();  // progress; same epoch

  v1::HeartbeatResponse resp;
  resp.set_epoch(epoch_);
  resp.set_lease_ms(LeaseMs());
  return resp;
}

absl::Status Membership::Leave(uint64_t member_id) {
  absl::MutexLock lock(&mu_);
  if (!members_.contains(member_id)) {
    return absl::NotFoundError(
        absl::StrCat("leave: member ", member_id, " is unknown"));
  }
  RemoveLocked({member_id});
  return absl::OkStatus();
}

void Membership::ExpireLeases() {
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
}

void Membership::ExpireLocked(absl::Time now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, e] : members_) {
    if (e.lease_end <= now) expired.push_back(id);
  }
  if (expired.empty()) return;
  spdlog::warn("scheduler: {} lease(s) ran out, first member {}",
               expired.size(), expired.front());
  RemoveLocked(expired);
}

void Membership::RemoveLocked(const std::vector<uint64_t>& ids) {
  Counters c{epoch_, workers_epoch_, next_member_id_, shard_map_version_};
  bool view_changed = false, workers_changed = false, slots_changed = false;
  StateBatch batch;
  for (uint64_t id : ids) {
    const v1::Role role = members_.at(id).member.role();
    view_changed |= InView(role);
    workers_changed |= role == v1::ROLE_WORKER;
    slots_changed |= role == v1::ROLE_SERVER;
    batch.DeleteMember(id);
  }
  if (view_changed) ++c.epoch;
  if (workers_changed) c.workers_epoch = c.epoch;
  if (slots_changed) ++c.shard_map_version;
  PutCounters(c, batch);
  // A removal stands even if it cannot be stored: the stored member would
  // only get a fresh lease at restart and expire again.
  if (absl::Status s = options_.store->Write(batch); !s.ok()) {
    spdlog::error("scheduler: cannot store member removal: {}", s.ToString());
  }
  for (uint64_t id : ids) members_.erase(id);
  epoch_ = c.epoch;
  workers_epoch_ = c.workers_epoch;
  shard_map_version_ = c.shard_map_version;
  RebuildViewLocked();
  spdlog::info("scheduler: {} member(s) left, epoch {}", ids.size(), epoch_);
}

void Membership::RebuildViewLocked() {
  v1::View v;
  v.set_epoch(epoch_);
  v.set_workers_epoch(workers_epoch_);
  v.set_consistency(options_.consistency);
  v1::ShardMap* map = v.mutable_shard_map();
  map->set_version(shard_map_version_);
  for (int s = 0; s < options_.num_shards; ++s) map->add_slots()->set_shard(s);
  for (const auto& [id, e] : members_) {
    switch (e.member.role()) {
      case v1::ROLE_SERVER: {
        *v.add_servers() = e.member;
        v1::ShardSlot* slot = map->mutable_slots(e.member.shard());
        slot->set_member_id(id);
        slot->set_address(e.member.address());
        break;
      }
      case v1::ROLE_WORKER:
        *v.add_workers() = e.member;
        break;
      default:
        break;
    }
  }
  view_ = std::move(v);
}

v1::View Membership::View() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

absl::StatusOr<v1::View> Membership::AwaitView(uint64_t known_epoch,
                                               absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return closed_ || epoch_ > known_epoch;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (closed_) return absl::UnavailableError("scheduler shutting down");
  if (epoch_ <= known_epoch) {
    return absl::DeadlineExceededError("no newer view yet");
  }
  return view_;
}

void Membership::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace strata::scheduler_internal
