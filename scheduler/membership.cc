#include "scheduler/membership.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status.h"
#include "scheduler/consistency_policy.h"
#include "spdlog/spdlog.h"

namespace strata::scheduler_internal {
namespace {

bool InView(v1::Role role) { return role != v1::ROLE_CLIENT; }

// Bounds on what a heartbeat reports: 2^48 steps and 1e12 samples/s are
// beyond any job, and keep the view's arithmetic (speed shares, clock
// differences) finite.
constexpr int64_t kMaxReportedClock = int64_t{1} << 48;
constexpr double kMaxSamplesPerSec = 1e12;

// The least lease a member restored at a scheduler's restart starts with.
constexpr absl::Duration kRestoreGrace = absl::Seconds(3);

struct Counters {
  uint64_t epoch;
  uint64_t workers_epoch;
  uint64_t next_member_id;
  uint64_t shard_map_version;
  uint64_t generation;
  uint64_t rollback_step;
};

void PutCounters(const Counters& c, StateBatch& batch) {
  batch.PutMeta("epoch", c.epoch);
  batch.PutMeta("workers_epoch", c.workers_epoch);
  batch.PutMeta("next_member_id", c.next_member_id);
  batch.PutMeta("shard_map_version", c.shard_map_version);
  batch.PutMeta("generation", c.generation);
  batch.PutMeta("rollback_step", c.rollback_step);
}

// A server's snapshot steps as sent: each >= 0, at most kMaxSnapshots.
absl::Status ValidateSnapshots(
    const google::protobuf::RepeatedField<int64_t>& steps) {
  constexpr int kMaxSnapshots = 1024;
  if (steps.size() > kMaxSnapshots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "more than ", kMaxSnapshots, " snapshot steps (", steps.size(), ")"));
  }
  for (int64_t s : steps) {
    if (s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative snapshot step ", s));
    }
  }
  return absl::OkStatus();
}

// The newest step in the snapshot list of every server of `view` that holds
// any (a server of a slot without chunks holds none), or nullopt.
std::optional<int64_t> CommonSnapshot(const v1::View& view) {
  std::optional<std::vector<int64_t>> common;
  for (const v1::Member& s : view.servers()) {
    // A server still catching up holds its own old state, not the job's.
    if (s.snapshots().empty() || s.catching_up()) continue;
    std::vector<int64_t> held(s.snapshots().begin(), s.snapshots().end());
    std::sort(held.begin(), held.end());
    if (!common) {
      common = std::move(held);
      continue;
    }
    std::vector<int64_t> both;
    std::set_intersection(common->begin(), common->end(), held.begin(),
                          held.end(), std::back_inserter(both));
    common = std::move(both);
  }
  if (!common || common->empty()) return std::nullopt;
  return common->back();
}

}  // namespace

Membership::Membership(MembershipOptions options, const PersistedState& state)
    : options_(std::move(options)),
      // Epoch 0 means "no view yet" to watchers, so the first view is 1.
      epoch_(std::max<uint64_t>(state.epoch, 1)),
      workers_epoch_(state.workers_epoch),
      next_member_id_(std::max<uint64_t>(state.next_member_id, 1)),
      shard_map_version_(state.shard_map_version),
      generation_(state.generation),
      rollback_step_(static_cast<int64_t>(state.rollback_step)) {
  STRATA_CHECK(options_.clock != nullptr && options_.store != nullptr);
  STRATA_CHECK(options_.num_shards > 0);
  // Members restored from the directory get at least kRestoreGrace to
  // reach the restarted scheduler: their channels reconnect up to a second
  // apart (cluster/scheduler_client.cc), and a member that loses its lease
  // here registers again, which a replica of a slot under way cannot.
  const absl::Time lease_end =
      options_.clock->Now() + std::max(options_.lease, kRestoreGrace);
  absl::MutexLock lock(&mu_);
  for (const v1::Member& m : state.members) {
    members_[m.id()] = Entry{m, lease_end};
  }
  consistency_.now = options_.consistency;
  RebuildViewLocked();
}

int64_t Membership::LeaseMs() const {
  return absl::ToInt64Milliseconds(options_.lease);
}

absl::StatusOr<uint64_t> Membership::ValidateRegister(
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
  // Addresses are host:port; a long one only bloats every view.
  constexpr size_t kMaxAddress = 256;
  if (req.address().size() > kMaxAddress ||
      req.metrics_address().size() > kMaxAddress) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register: an address is longer than ", kMaxAddress, " bytes"));
  }
  const bool first = req.worker() == 0 && req.incarnation() == 0;
  if (!first && (req.worker() == 0 || req.worker() >= next_member_id_ ||
                 req.incarnation() < 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register: worker ", req.worker(), " incarnation ", req.incarnation(),
        " is not a member registering again (want an earlier member id and "
        "an incarnation >= 2, or both 0)"));
  }
  if (req.role() != v1::ROLE_SERVER) return 0;
  if (req.data_dir_id().size() > 256) {
    return absl::InvalidArgumentError(
        "register: data_dir_id is longer than 256 bytes");
  }
  if (absl::Status s = ValidateSnapshots(req.snapshots()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("register: ", s.message()));
  }
  if (req.shard() < 0 || req.shard() >= options_.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: server shard ", req.shard(), " is outside [0, ",
                     options_.num_shards, ")"));
  }
  if (req.address().empty()) {
    return absl::InvalidArgumentError(
        "register: a server must give the address it serves on");
  }
  // The slot's live servers. The same data directory, opened by a new
  // process: the old one is dead (a live server holds the directory's
  // lock), so its lease is void. A server registering again after a lost
  // lease never supersedes: it is the old process, and the new one took its
  // place.
  std::vector<const v1::Member*> serving;
  for (const auto& [id, e] : members_) {
    if (e.member.role() != v1::ROLE_SERVER || e.member.shard() != req.shard()) {
      continue;
    }
    if (first && !req.data_dir_id().empty() &&
        req.data_dir_id() == e.member.data_dir_id()) {
      return id;
    }
    serving.push_back(&e.member);
  }
  if (static_cast<int>(serving.size()) < options_.replicas) return 0;
  const v1::Member& taken = *serving.front();
  return absl::FailedPreconditionError(absl::StrCat(
      "register: shard slot ", req.shard(), " is already served by member ",
      taken.id(), " at ", taken.address(),
      options_.replicas > 1
          ? absl::StrCat(" and its ", options_.replicas - 1, " replica(s)")
          : "",
      !first && !req.data_dir_id().empty() &&
              req.data_dir_id() == taken.data_dir_id()
          ? " (this server was superseded: stop it)"
          : ""));
}

absl::StatusOr<v1::RegisterResponse> Membership::Register(
    const v1::RegisterRequest& req, const RollbackRule& rollback) {
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);  // a slot whose server ran out may be taken again
  STRATA_ASSIGN_OR_RETURN(const uint64_t superseded, ValidateRegister(req));
  Counters c{epoch_,
             workers_epoch_,
             next_member_id_ + 1,
             shard_map_version_,
             generation_,
             static_cast<uint64_t>(rollback_step_)};
  if (InView(req.role())) ++c.epoch;
  if (req.role() == v1::ROLE_WORKER) c.workers_epoch = c.epoch;
  if (req.role() == v1::ROLE_SERVER) ++c.shard_map_version;
  // The rollback rule adds what it changes (the ledger's rollback) to the
  // same batch: the view's generation and the ledger move in one write.
  StateBatch batch;
  if (rollback) {
    v1::View after = view_;  // the other servers as they will be
    after.clear_servers();
    for (const v1::Member& m : view_.servers()) {
      if (m.id() != superseded) *after.add_servers() = m;
    }
    STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> step,
                            rollback(req, after, batch));
    if (step.has_value()) {
      ++c.generation;
      c.rollback_step = static_cast<uint64_t>(*step);
    }
  }

  v1::Member m;
  m.set_id(next_member_id_);
  m.set_role(req.role());
  m.set_address(req.address());
  m.set_metrics_address(req.metrics_address());
  m.set_devices(req.devices());
  m.set_capacity(req.capacity() == 0 ? 1.0 : req.capacity());
  m.set_shard(req.role() == v1::ROLE_SERVER ? req.shard() : -1);
  m.set_joined_epoch(c.epoch);
  m.set_worker(req.worker() == 0 ? m.id() : req.worker());
  m.set_incarnation(req.incarnation() == 0 ? 1 : req.incarnation());
  if (req.role() == v1::ROLE_SERVER) {
    m.set_data_dir_id(req.data_dir_id());
    *m.mutable_snapshots() = req.snapshots();
    m.set_catching_up(SlotServedLocked(req.shard(), superseded));
    if (!m.catching_up()) m.set_serving_epoch(c.epoch);
  }

  // Store first, so a storage error leaves the table as it was.
  batch.PutMember(m);
  if (superseded != 0) batch.DeleteMember(superseded);
  PutCounters(c, batch);
  STRATA_RETURN_IF_ERROR(options_.store->Write(batch));

  if (superseded != 0) {
    members_.erase(superseded);
    spdlog::warn(
        "scheduler: member {} superseded by a restarted server of slot {}",
        superseded, req.shard());
  }
  epoch_ = c.epoch;
  workers_epoch_ = c.workers_epoch;
  next_member_id_ = c.next_member_id;
  shard_map_version_ = c.shard_map_version;
  if (c.generation != generation_) {
    spdlog::warn("scheduler: the job rolls back to step {} (generation {})",
                 c.rollback_step, c.generation);
  }
  generation_ = c.generation;
  rollback_step_ = static_cast<int64_t>(c.rollback_step);
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
  if (absl::Status s = ValidateSnapshots(req.snapshots()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("heartbeat: ", s.message()));
  }
  STRATA_RETURN_IF_ERROR(StepTimes::Validate(req.steps()));
  // What a member reports shows in every view: only values it could have.
  if (req.clock() < -1 || req.clock() > kMaxReportedClock) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat: clock ", req.clock(), " is no step (-1 to ",
                     kMaxReportedClock, ")"));
  }
  if (!std::isfinite(req.samples_per_sec()) || req.samples_per_sec() < 0 ||
      req.samples_per_sec() > kMaxSamplesPerSec) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat: samples_per_sec must be finite, in [0, ",
                     kMaxSamplesPerSec, "], got ", req.samples_per_sec()));
  }
  // A worker's paths count the job's slots, each once.
  if (const v1::WirePaths& w = req.wire();
      uint64_t{w.region()} + w.shm() + w.bulk() + w.grpc() >
      static_cast<uint64_t>(options_.num_shards)) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat: wire paths count more than the job's ",
                     options_.num_shards, " shard slots"));
  }
  Entry& e = it->second;
  e.lease_end = now + options_.lease;
  e.member.set_clock(req.clock());
  e.member.set_samples_per_sec(req.samples_per_sec());
  if (e.member.role() == v1::ROLE_SERVER) {
    *e.member.mutable_snapshots() = req.snapshots();
  }
  if (e.member.role() == v1::ROLE_WORKER && !req.steps().empty()) {
    e.steps.Add(req.steps());
    *e.member.mutable_step_times() = e.steps.Summary();
  }
  if (e.member.role() == v1::ROLE_WORKER && req.has_wire()) {
    *e.member.mutable_wire() = req.wire();
  }
  if (InView(e.member.role())) RebuildViewLocked();  // progress; same epoch

  v1::HeartbeatResponse resp;
  resp.set_epoch(epoch_);
  resp.set_lease_ms(LeaseMs());
  if (e.member.role() == v1::ROLE_SERVER) {
    if (std::optional<int64_t> common = CommonSnapshot(view_)) {
      resp.set_common_snapshot(*common);
    }
  }
  return resp;
}

bool Membership::SlotServedLocked(int slot, uint64_t except) const {
  for (const auto& [id, e] : members_) {
    if (id != except && e.member.role() == v1::ROLE_SERVER &&
        e.member.shard() == slot && !e.member.catching_up()) {
      return true;
    }
  }
  return false;
}

absl::Status Membership::CaughtUp(uint64_t member_id, uint64_t primary) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(options_.clock->Now());
  auto it = members_.find(member_id);
  if (it == members_.end() || it->second.member.role() != v1::ROLE_SERVER) {
    return absl::NotFoundError(absl::StrCat(
        "caught up: member ", member_id,
        " is not a live server catching up from its slot's primary"));
  }
  const int slot = it->second.member.shard();
  const uint64_t now_primary = view_.shard_map().slots(slot).member_id();
  if (!it->second.member.catching_up()) {
    // A retry whose first answer was lost: done if it is that one's backup.
    if (now_primary == primary) return absl::OkStatus();
    return absl::NotFoundError(
        absl::StrCat("caught up: member ", member_id, " is not catching up"));
  }
  if (now_primary != primary) {
    return absl::FailedPreconditionError(absl::StrCat(
        "caught up: member ", member_id, " caught up from member ", primary,
        ", but slot ", slot, "'s primary is member ", now_primary,
        " now: it missed that one's changes; start it again"));
  }
  v1::Member m = it->second.member;
  m.set_catching_up(false);
  m.set_serving_epoch(epoch_ + 1);
  Counters c{epoch_ + 1,      workers_epoch_,
             next_member_id_, shard_map_version_ + 1,
             generation_,     static_cast<uint64_t>(rollback_step_)};
  StateBatch batch;
  batch.PutMember(m);
  PutCounters(c, batch);
  STRATA_RETURN_IF_ERROR(options_.store->Write(batch));
  it->second.member = std::move(m);
  epoch_ = c.epoch;
  shard_map_version_ = c.shard_map_version;
  RebuildViewLocked();
  spdlog::info(
      "scheduler: member {} caught up from member {}: a backup of slot {}, "
      "epoch {}",
      member_id, primary, slot, epoch_);
  return absl::OkStatus();
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
  lease_expiries_ += expired.size();
  RemoveLocked(expired);
}

void Membership::RemoveLocked(const std::vector<uint64_t>& ids) {
  Counters c{epoch_,          workers_epoch_,
             next_member_id_, shard_map_version_,
             generation_,     static_cast<uint64_t>(rollback_step_)};
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
  v.set_consistency(consistency_.now.ToString());
  if (consistency_.automatic.has_value()) {
    v.set_consistency_auto(consistency_.automatic->ToString());
  }
  if (consistency_.pending.has_value()) {
    *v.mutable_consistency_pending() = *consistency_.pending;
  }
  v.set_schedule_offset(consistency_.schedule_offset);
  for (const v1::ConsistencySwitch& sw : consistency_.switches) {
    *v.add_consistency_switches() = sw;
  }
  v.set_generation(generation_);
  v.set_rollback_step(rollback_step_);
  v.set_replicas(static_cast<uint32_t>(options_.replicas));
  v1::ShardMap* map = v.mutable_shard_map();
  map->set_version(shard_map_version_);
  for (int s = 0; s < options_.num_shards; ++s) map->add_slots()->set_shard(s);
  // Each slot's serving servers in the order they began to serve (an id
  // breaks ties): the first is its primary, so a backup is promoted the
  // moment its primary leaves the view, and a server that caught up comes
  // after the one it caught up from. A server still catching up is never
  // either.
  std::vector<std::vector<const v1::Member*>> serving(options_.num_shards);
  for (const auto& [id, e] : members_) {
    switch (e.member.role()) {
      case v1::ROLE_SERVER: {
        *v.add_servers() = e.member;
        if (!e.member.catching_up()) {
          serving[e.member.shard()].push_back(&e.member);
          break;
        }
        v1::ShardReplica* joining =
            map->mutable_slots(e.member.shard())->add_joining();
        joining->set_member_id(id);
        joining->set_address(e.member.address());
        break;
      }
      case v1::ROLE_WORKER:
        *v.add_workers() = e.member;
        break;
      default:
        break;
    }
  }
  for (int s = 0; s < options_.num_shards; ++s) {
    std::vector<const v1::Member*>& servers = serving[s];
    std::sort(servers.begin(), servers.end(),
              [](const v1::Member* a, const v1::Member* b) {
                return std::pair(a->serving_epoch(), a->id()) <
                       std::pair(b->serving_epoch(), b->id());
              });
    v1::ShardSlot* slot = map->mutable_slots(s);
    for (const v1::Member* m : servers) {
      if (slot->member_id() == 0) {
        slot->set_member_id(m->id());
        slot->set_address(m->address());
      } else {
        v1::ShardReplica* backup = slot->add_backups();
        backup->set_member_id(m->id());
        backup->set_address(m->address());
      }
    }
  }
  // The advice from the workers' step times; the job's staleness cap
  // (auto's, else a fixed SSP bound; kDefaultMaxStaleness otherwise) caps
  // the staleness it suggests.
  const Consistency& job = consistency_.now;
  const int cap = consistency_.automatic.has_value()
                      ? consistency_.automatic->max_staleness
                  : job.mode == Consistency::kSsp && job.staleness > 0
                      ? job.staleness
                      : kDefaultMaxStaleness;
  const bool allow_asp =
      !consistency_.automatic.has_value() || consistency_.automatic->allow_asp;
  *v.mutable_consistency_advice() = AdviseConsistency(
      job, {v.workers().begin(), v.workers().end()}, cap, allow_asp);
  view_ = std::move(v);
}

absl::Status Membership::SetConsistency(ConsistencyState state) {
  absl::MutexLock lock(&mu_);
  if (state.now.ToString() != consistency_.now.ToString()) {
    STRATA_RETURN_IF_ERROR(RaiseEpochLocked());
    spdlog::info("scheduler: the job runs {} from epoch {}",
                 state.now.ToString(), epoch_);
  }
  consistency_ = std::move(state);
  RebuildViewLocked();
  return absl::OkStatus();
}

absl::Status Membership::SetDrained(uint64_t member_id, bool drained) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(member_id);
  if (it == members_.end() || it->second.member.role() != v1::ROLE_WORKER ||
      it->second.member.drained() == drained) {
    return absl::OkStatus();
  }
  STRATA_RETURN_IF_ERROR(RaiseEpochLocked());
  it->second.member.set_drained(drained);
  spdlog::info(
      "scheduler: worker {} {} from epoch {}", member_id,
      drained ? "has no samples left to lease" : "leases samples again",
      epoch_);
  RebuildViewLocked();
  return absl::OkStatus();
}

absl::Status Membership::RaiseEpochLocked() {
  Counters c{epoch_ + 1,      workers_epoch_,
             next_member_id_, shard_map_version_,
             generation_,     static_cast<uint64_t>(rollback_step_)};
  StateBatch batch;
  PutCounters(c, batch);
  STRATA_RETURN_IF_ERROR(options_.store->Write(batch));
  epoch_ = c.epoch;
  return absl::OkStatus();
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
