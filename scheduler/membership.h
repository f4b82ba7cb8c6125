// Membership, leases and the cluster view. Private to
// scheduler/; the gRPC handlers call it.
//
// Rules:
//  - Register gives a fresh member id (never reused: the counter is stored)
//    and a lease; Heartbeat renews it; Leave or a lease that runs out removes
//    the member. Each of these changes of membership raises the epoch once.
//  - Servers occupy one shard slot each; a slot holds at most `replicas`
//    live servers, the one with the lowest member id its primary (so the
//    oldest backup is promoted when the primary leaves). A server that
//    registers into a slot already served joins it catching up
//    (Member.catching_up, ShardSlot.joining): neither primary nor backup
//    until CaughtUp. Taking or freeing a place in a slot, and catching
//    up, raise the shard map version. A server's first
//    registration with the data directory of one of the slot's live
//    servers supersedes it (one change: one epoch step).
//  - A registration may roll the job back (RollbackRule): the same change
//    raises the view's generation and sets its rollback step.
//  - ROLE_CLIENT members hold a lease but are not in the view, so their
//    joins and exits do not change the epoch.
//  - Heartbeats update a member's clock and speed in the view without
//    raising the epoch.
#ifndef STRATA_SCHEDULER_MEMBERSHIP_H_
#define STRATA_SCHEDULER_MEMBERSHIP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/consistency.h"
#include "scheduler/state_store.h"
#include "scheduler/step_times.h"
#include "strata/v1/scheduler.pb.h"

namespace strata::scheduler_internal {

// Decides, for a registration about to be admitted, whether the job rolls
// back and to which step; `after` is the current view less a server it
// supersedes. An error refuses the registration.
using RollbackRule = std::function<absl::StatusOr<std::optional<int64_t>>(
    const v1::RegisterRequest& req, const v1::View& after, StateBatch& batch)>;

// The job's consistency as the view shows it: the mode it runs now, and
// under --consistency auto the switch under way and those made (from the
// ledger, scheduler/ledger.h).
struct ConsistencyState {
  Consistency now;
  std::optional<AutoConsistency> automatic;  // unset: a fixed setting
  std::optional<v1::ConsistencySwitch> pending;
  std::vector<v1::ConsistencySwitch> switches;
  int64_t schedule_offset = 0;  // View.schedule_offset
};

struct MembershipOptions {
  int num_shards = 1;
  int replicas = 1;  // live servers a slot may hold; >= 1
  Consistency consistency;
  // How long a member stays without a heartbeat. REQUIRES: > 0 (the
  // Scheduler passes SchedulerOptions::lease).
  absl::Duration lease = absl::ZeroDuration();
  Clock* clock = nullptr;       // not owned; must outlive the Membership
  StateStore* store = nullptr;  // not owned; must outlive the Membership
};

// The member table and the view derived from it. Thread-safe.
class Membership {
 public:
  // Restores `state` (members get a full lease from now, at least 3 s).
  // REQUIRES: the
  // options' clock and store are set and num_shards > 0.
  Membership(MembershipOptions options, const PersistedState& state);

  // Adds a member (superseding a server, see above), rolling the job back
  // if `rollback` (may be empty) says so. Errors: INVALID_ARGUMENT (bad
  // role, shard, capacity, address or snapshot list), FAILED_PRECONDITION
  // (the server's slot is taken by a live server of another directory, or
  // this one is a superseded server registering again), the rule's error,
  // or a storage error (then nothing changed).
  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& req, const RollbackRule& rollback = nullptr);

  // Renews a lease and records progress. Errors: NOT_FOUND if the member is
  // unknown or its lease ran out (it must register again).
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& req);

  // Removes a member at once. Errors: NOT_FOUND if unknown.
  absl::Status Leave(uint64_t member_id);
  // Member `member_id`, a server catching up (Member.catching_up), caught
  // up from its slot's primary `primary`: a backup from this view on.
  // FAILED_PRECONDITION if `primary` is no longer the slot's primary;
  // NOT_FOUND if the member is not live or not catching up.
  absl::Status CaughtUp(uint64_t member_id, uint64_t primary);

  // Removes every member whose lease ended by clock->Now().
  void ExpireLeases();

  // Shows `state` in the view; a change of the mode the job runs raises
  // the epoch (so every member reads it), the rest does not. Storage
  // errors: nothing changed.
  absl::Status SetConsistency(ConsistencyState state);

  // Shows whether worker `member_id` is drained (Member.drained: every
  // sample of its SSP/ASP job handed out to others); a change raises the
  // epoch, so the servers read it. OK, doing nothing, for a member that is
  // not a live worker. Storage errors: nothing changed.
  absl::Status SetDrained(uint64_t member_id, bool drained);

  // The current view.
  v1::View View() const;

  // Waits up to `timeout` for a view with epoch > known_epoch and returns it.
  // Errors: DEADLINE_EXCEEDED on timeout; UNAVAILABLE once Close was called.
  absl::StatusOr<v1::View> AwaitView(uint64_t known_epoch,
                                     absl::Duration timeout) const;

  // Wakes every AwaitView caller for good.
  void Close();

  // Members removed because their lease ran out, since this process began.
  uint64_t lease_expiries() const {
    return lease_expiries_.load(std::memory_order_relaxed);
  }

 private:
  struct Entry {
    v1::Member member;
    absl::Time lease_end;
    StepTimes steps;  // workers: their last steps (member.step_times)
  };

  // The member id `req` supersedes (0: none), or why it is refused.
  absl::StatusOr<uint64_t> ValidateRegister(
      const v1::RegisterRequest& req) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Removes every member whose lease ended by `now`.
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `ids` (all live) as one change: one epoch step.
  void RemoveLocked(const std::vector<uint64_t>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebuildViewLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // epoch_ + 1, stored. Storage errors: nothing changed.
  absl::Status RaiseEpochLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a live server other than `except`, not catching up, serves
  // `slot`.
  bool SlotServedLocked(int slot, uint64_t except) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int64_t LeaseMs() const;

  const MembershipOptions options_;
  mutable absl::Mutex mu_;
  absl::btree_map<uint64_t, Entry> members_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  uint64_t workers_epoch_ ABSL_GUARDED_BY(mu_);
  uint64_t next_member_id_ ABSL_GUARDED_BY(mu_);
  uint64_t shard_map_version_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_);
  int64_t rollback_step_ ABSL_GUARDED_BY(mu_);
  ConsistencyState consistency_ ABSL_GUARDED_BY(mu_);
  v1::View view_ ABSL_GUARDED_BY(mu_);  // derived from the fields above
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> lease_expiries_{0};
};

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_MEMBERSHIP_H_
