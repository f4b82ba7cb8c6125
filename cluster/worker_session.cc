#include "cluster/worker_session.h"

#include <algorithm>
#include <functional>
#include <set>

#include "absl/strings/match.h"
#include "common/status.h"
#include "common/work_share.h"
#include "spdlog/spdlog.h"

namespace strata {

absl::StatusOr<WorkerSession> JoinAsWorker(SchedulerClientOptions options,
                                           int min_workers,
                                           absl::Duration timeout) {
  WorkerSession s;
  options.role = v1::ROLE_WORKER;
  STRATA_ASSIGN_OR_RETURN(s.scheduler, SchedulerClient::Connect(options));
  // The view must hold this member as it is when the view is taken: a
  // lease lost while waiting (a loaded machine) registers it again under a
  // new id, which only a later view holds.
  uint64_t member = 0;
  STRATA_ASSIGN_OR_RETURN(
      s.view, s.scheduler->WaitForMemberView(
                  [min_workers, &member](const v1::View& v, uint64_t id) {
                    member = id;
                    return v.workers_size() >= min_workers &&
                           RankOf(v, id).ok();
                  },
                  timeout));
  STRATA_ASSIGN_OR_RETURN(
      s.consistency,
      ParseConsistency(s.view.consistency().empty() ? "bsp"
                                                    : s.view.consistency()));
  STRATA_ASSIGN_OR_RETURN(s.rank, RankOf(s.view, member));
  s.workers = s.view.workers_size();
  return s;
}

absl::StatusOr<StepView> CurrentStepView(SchedulerClient& scheduler,
                                         absl::Duration timeout) {
  STRATA_ASSIGN_OR_RETURN(v1::View view,
                          scheduler.WaitForMemberView(
                              [](const v1::View& v, uint64_t member) {
                                return RankOf(v, member).ok();
                              },
                              timeout));
  StepView sv;
  sv.epoch = view.epoch();
  sv.member = scheduler.member_id();
  STRATA_ASSIGN_OR_RETURN(sv.rank, RankOf(view, sv.member));
  sv.workers = view.workers_size();
  sv.generation = view.generation();
  return sv;
}

v1::LedgerJob LedgerJobFor(const ChunkPlan& plan, int64_t steps, int64_t batch,
                           int64_t samples_per_epoch, uint64_t seed) {
  v1::LedgerJob job;
  job.set_batch(batch);
  job.set_total_samples(steps * batch);
  job.set_samples_per_epoch(samples_per_epoch);
  job.set_seed(seed);
  std::set<int> slots;
  for (const ChunkInfo& c : plan.chunks) slots.insert(c.shard);
  for (int slot : slots) job.add_slots(slot);
  return job;
}

namespace {

StepWork ToStepWork(const StepView& sv, const v1::LeaseWorkResponse& lease) {
  StepWork w;
  w.view = sv;
  w.stamp_epoch = lease.epoch();
  if (lease.workers() > 0) {  // BSP: the split's ranks
    w.bsp = true;
    w.view.rank = lease.rank();
    w.view.workers = lease.workers();
  }
  w.units.assign(lease.units().begin(), lease.units().end());
  for (const v1::WorkUnit& u : w.units) w.samples += u.count();
  w.schedule_offset = lease.schedule_offset();
  return w;
}

// Leases more steps after `step` into `ahead` when it holds few, on the
// step's time: within half a second, so that a scheduler that hangs (not
// only one that refuses connections) holds the step that long at most;
// one that does not answer is asked again after a backoff (LeaseAhead).
void TopUp(SchedulerClient& scheduler, int64_t step, const v1::LedgerJob& job,
           const StepView& sv, LeaseAhead& ahead) {
  const int want = ahead.WantAhead(step, absl::Now());
  if (want == 0) return;
  absl::StatusOr<v1::LeaseWorkResponse> more =
      scheduler.LeaseWork(step + 1, job, want - 1, absl::Milliseconds(500));
  if (!more.ok()) {
    ahead.AskFailed(absl::Now());
    return;
  }
  // The first of them too: it is a lease of its own (leased_ahead holds
  // those after it).
  v1::LeaseWorkResponse first = *more;
  first.clear_leased_ahead();
  *more->mutable_leased_ahead()->Add() = std::move(first);
  ahead.Keep(*more, sv.member, sv.generation);
}

}  // namespace

absl::StatusOr<StepWork> LeaseStepWork(SchedulerClient& scheduler, int64_t step,
                                       const v1::LedgerJob& job,
                                       absl::Duration timeout,
                                       LeaseAhead* ahead) {
  absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    STRATA_ASSIGN_OR_RETURN(
        const StepView sv,
        CurrentStepView(
            scheduler, std::max(deadline - absl::Now(), absl::ZeroDuration())));
    if (ahead != nullptr) {
      if (std::optional<v1::LeaseWorkResponse> held =
              ahead->Take(step, scheduler.view(), sv.member, absl::Now())) {
        TopUp(scheduler, step, job, sv, *ahead);
        return ToStepWork(sv, *held);
      }
    }
    // No lease in hand: this ask is the step's own, so a backoff from a
    // failed top-up does not hold back its leases ahead (a time past any
    // backoff).
    const int want =
        ahead == nullptr ? 0 : ahead->WantAhead(step, absl::InfiniteFuture());
    absl::StatusOr<v1::LeaseWorkResponse> lease =
        scheduler.LeaseWork(step, job, want);
    if (absl::IsUnavailable(lease.status()) &&
        scheduler.view().consistency_pending().to() == "bsp") {
      // A switch back to BSP waits for every lease out to be applied: a
      // straggler's leases ahead take as long as they take.
      deadline = std::max(deadline, absl::Now() + kBackToBspDrain);
    }
    if ((absl::IsNotFound(lease.status()) ||
         absl::IsUnavailable(lease.status())) &&
        absl::Now() < deadline) {
      // NOT_FOUND: our lease ran out meanwhile (the client registers
      // again), or the scheduler's view is ahead of ours. UNAVAILABLE: the
      // scheduler is restarting, or (SSP/ASP) the last samples are out with
      // other workers. Ask again shortly.
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    if (!lease.ok()) return lease.status();
    if (ahead != nullptr) ahead->Keep(*lease, sv.member, sv.generation);
    return ToStepWork(sv, *lease);
  }
}

Consistency LeasedMode(const StepWork& work, const v1::View& view) {
  if (work.bsp) return Consistency();
  absl::StatusOr<Consistency> c = ParseConsistency(view.consistency());
  if (c.ok() && c->mode != Consistency::kBsp) return *c;
  return Consistency{.mode = Consistency::kAsp};
}

namespace {

// Under --consistency auto: the view, once `holds` says so of it (waiting
// up to `wait` for one that does); nullopt for a job whose consistency is
// fixed, or when none does in time.
std::optional<v1::View> AutoViewWhere(
    SchedulerClient& scheduler, std::function<bool(const v1::View&)> holds,
    absl::Duration wait) {
  v1::View view = scheduler.view();
  if (view.consistency_auto().empty()) return std::nullopt;
  if (!holds(view) && wait > absl::ZeroDuration()) {
    absl::StatusOr<v1::View> newer = scheduler.WaitForView(holds, wait);
    if (newer.ok()) view = *std::move(newer);
  }
  if (!holds(view)) return std::nullopt;
  return view;
}

}  // namespace

std::optional<Consistency> LeftBsp(SchedulerClient& scheduler,
                                   absl::Duration wait) {
  const std::optional<v1::View> view = AutoViewWhere(
      scheduler,
      [](const v1::View& v) {
        return !v.consistency().empty() && v.consistency() != "bsp";
      },
      wait);
  if (!view.has_value()) return std::nullopt;
  absl::StatusOr<Consistency> c = ParseConsistency(view->consistency());
  if (!c.ok()) return std::nullopt;
  return *c;
}

std::optional<BspReturn> BackInBsp(SchedulerClient& scheduler, int64_t clock,
                                   const absl::Status& refused) {
  // The ledger's BSP answer to an SSP/ASP clock: the view says so at once
  // on the scheduler, soon here. Any other refusal: the view as it is.
  const absl::Duration wait =
      absl::StrContains(refused.message(), kBeforeBackToBsp)
          ? absl::Seconds(60)
          : absl::ZeroDuration();
  const std::optional<v1::View> view = AutoViewWhere(
      scheduler,
      [clock](const v1::View& v) {
        return v.consistency() == "bsp" && !v.consistency_switches().empty() &&
               v.consistency_switches().rbegin()->step() > clock;
      },
      wait);
  if (!view.has_value()) return std::nullopt;
  return BspReturn{.step = view->consistency_switches().rbegin()->step(),
                   .schedule_offset = view->schedule_offset()};
}

bool RedoInNewerView(SchedulerClient& scheduler, const absl::Status& status,
                     const StepView& computed, absl::Duration timeout) {
  if (!absl::IsAborted(status) && !absl::IsFailedPrecondition(status)) {
    return false;
  }
  absl::StatusOr<v1::View> newer = scheduler.WaitForMemberView(
      [&](const v1::View& v, uint64_t member) {
        return v.epoch() > computed.epoch || member != computed.member;
      },
      timeout);
  if (!newer.ok()) return false;
  if (absl::IsAborted(status)) return true;
  // FAILED_PRECONDITION: only a fenced member redoes (any other one is a
  // request that can never succeed).
  return scheduler.member_id() != computed.member ||
         !RankOf(*newer, computed.member).ok();
}

std::optional<int64_t> AdoptRollback(SchedulerClient& scheduler,
                                     uint64_t* generation) {
  const v1::View view = scheduler.view();
  if (view.generation() <= *generation) return std::nullopt;
  spdlog::warn(
      "strata worker: the job rolled back to step {} (generation {}): going "
      "on from there",
      view.rollback_step(), view.generation());
  *generation = view.generation();
  return view.rollback_step();
}

bool AwaitRollback(SchedulerClient& scheduler, uint64_t generation,
                   absl::Duration timeout) {
  return scheduler
      .WaitForView(
          [generation](const v1::View& v) {
            return v.generation() > generation;
          },
          timeout)
      .ok();
}

}  // namespace strata
