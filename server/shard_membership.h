// What a shard knows of the job's membership: the live workers and their
// epochs (ShardView), the rollback generation requests wait for, and
// whether the server is shutting down. Requests stamped with a newer view
// or generation than the shard's wait here for it to catch up.
#ifndef STRATA_SERVER_SHARD_MEMBERSHIP_H_
#define STRATA_SERVER_SHARD_MEMBERSHIP_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/chunk.h"
#include "server/shard_options.h"
#include "server/wait_quota.h"
#include "strata/v1/common.pb.h"

namespace strata {

// Thread-safe.
class ShardMembership {
 public:
  // Waits for a view or generation this shard has not reached last up to
  // options.view_wait, at most options.max_view_waits_per_member of a
  // member's and options.max_view_waits in all at once; each is counted in
  // counters.view_waits, each refused in counters.view_waits_refused.
  ShardMembership(const ShardOptions& options, ShardCounters& counters)
      : view_wait_(options.view_wait),
        max_waits_per_member_(options.max_view_waits_per_member),
        max_waits_(options.max_view_waits),
        counters_(counters),
        waits_(options.max_view_waits) {}

  // Publishes `v` and wakes the requests waiting for it; false (nothing
  // changed) when it is older than the view held.
  bool Publish(const v1::View& v);
  // What a shard keeps of `v`.
  static ShardView ViewOf(const v1::View& v);
  ShardView Get() const;
  bool IsWorker(uint64_t member) const;

  // OK when `member` is a live worker once the view has reached `epoch`
  // (waiting up to view_wait) and `also` (called under the view's lock)
  // says OK: UNAVAILABLE if the view has not reached it (or too many
  // requests wait for it already), FAILED_PRECONDITION for a member that
  // is not a live worker.
  absl::Status AwaitWorker(
      uint64_t member, uint64_t epoch,
      absl::FunctionRef<absl::Status(const ShardView&)> also =
          [](const ShardView&) { return absl::OkStatus(); });
  // Waits up to view_wait for the shard to reach rollback `generation`
  // (for a request of `member`); UNAVAILABLE if it does not (or too many
  // requests wait already, or the shard is cancelled).
  absl::Status AwaitGeneration(uint64_t generation, uint64_t member);
  // Every chunk is in `generation` now: wakes the requests waiting for it.
  void SetGeneration(uint64_t generation);
  uint64_t generation() const { return generation_.load(); }
  // View.schedule_offset: the learning-rate schedule's step of a BSP step
  // or SSP/ASP clock t is t - schedule_offset. Set before a switch's
  // chunks are adopted (Shard::UpdateView), so the new gate's first update
  // uses it; it changes only when a job goes back to BSP, after every
  // SSP/ASP push was applied.
  void SetScheduleOffset(int64_t offset) { schedule_offset_.store(offset); }
  // The schedule's step of `step` (never below 0).
  int64_t ScheduleStep(int64_t step) const {
    return std::max<int64_t>(0, step - schedule_offset_.load());
  }

  // Fails every wait with UNAVAILABLE, now and later.
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }

 private:
  // Counts a wait of `member`'s in; UNAVAILABLE when it or all have their
  // fill. Each OK is matched by waits_.Leave(member).
  absl::Status EnterWait(uint64_t member);
  // Waits on changed_ until `done` or view_wait passes or cancellation.
  void WaitFor(absl::FunctionRef<bool()> done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration view_wait_;
  const int max_waits_per_member_;
  const int max_waits_;
  ShardCounters& counters_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  ShardView view_ ABSL_GUARDED_BY(mu_);
  WaitQuota waits_;  // requests waiting for the view or generation
  // Read without a lock by every push and pull, written under mu_ (whose
  // changed_ wakes the requests waiting for it).
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> schedule_offset_{0};
  std::atomic<bool> cancelled_{false};
};

}  // namespace strata

#endif  // STRATA_SERVER_SHARD_MEMBERSHIP_H_
