// Joining the cluster as a training worker: the steps every trainer takes
// before its first step.
#ifndef STRATA_CLUSTER_WORKER_SESSION_H_
#define STRATA_CLUSTER_WORKER_SESSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/lease_ahead.h"
#include "cluster/scheduler_client.h"
#include "common/chunk_plan.h"
#include "common/consistency.h"
#include "strata/v1/ledger.pb.h"

namespace strata {

// A registered worker and the view it starts from.
struct WorkerSession {
  std::unique_ptr<SchedulerClient> scheduler;
  v1::View view;            // the first view with at least min_workers workers
  Consistency consistency;  // the job's (bsp when the view names none)
  int rank = 0;     // position among the view's workers (common/work_share.h)
  int workers = 0;  // live workers in `view`
};

// Registers with the scheduler at `options.scheduler_address` as a worker
// (options.role is set to ROLE_WORKER) and waits up to `timeout` until at
// least `min_workers` workers are live. Errors:
// those of SchedulerClient::Connect; DEADLINE_EXCEEDED when the workers do
// not come; INVALID_ARGUMENT for a view with a malformed consistency.
absl::StatusOr<WorkerSession> JoinAsWorker(SchedulerClientOptions options,
                                           int min_workers,
                                           absl::Duration timeout);

// The view a worker computes a step in, and its place in it. A BSP step's
// shares follow the view's live workers, so a step whose view is overtaken
// (ps.proto: ABORTED) is computed again in the newer one.
struct StepView {
  uint64_t epoch = 0;
  uint64_t member = 0;  // this worker's member id in that view
  int rank = 0;         // common/work_share.h
  int workers = 1;
  uint64_t generation = 0;  // the view's rollback generation
};

// The latest view, once this worker (under its current member id: a client
// whose lease ran out registers again under a new one) is one of its live
// workers. DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<StepView> CurrentStepView(
    SchedulerClient& scheduler, absl::Duration timeout = absl::Seconds(60));

// The data ledger's job for a model placed by `plan` (the slots that hold
// its chunks) trained for `steps` steps of `batch` samples from a training
// split of `samples_per_epoch` windows in the order of `seed`.
v1::LedgerJob LedgerJobFor(const ChunkPlan& plan, int64_t steps, int64_t batch,
                           int64_t samples_per_epoch, uint64_t seed);

// A worker's samples for one step, leased from the data ledger.
struct StepWork {
  // The view the lease was asked in (RedoInNewerView waits for a newer one)
  // and the place in the split (BSP: its rank and size).
  StepView view;
  // What this step's pushes and pulls are stamped with: BSP, the workers
  // epoch of the split (servers refuse stamps older than theirs).
  uint64_t stamp_epoch = 0;
  std::vector<v1::WorkUnit> units;  // BSP: one contiguous run
  int64_t samples = 0;              // over all units
  bool bsp = false;                 // a BSP step's share; else SSP/ASP
  int64_t schedule_offset = 0;      // BSP: LeaseWorkResponse's
};

// The consistency `work` was leased under, with `view` the worker's view
// now: BSP for a BSP step's share, else the view's SSP or ASP setting (ASP
// when the view names neither). Under --consistency auto the job switches
// live, and a worker follows it at the first lease of the new mode.
Consistency LeasedMode(const StepWork& work, const v1::View& view);

// Under --consistency auto, for a worker in BSP about to judge a pull or a
// lease by BSP's rules: the job's SSP/ASP mode if the view has left BSP
// (waiting up to `wait` for a view that has, when `wait` is not zero: a
// chunk version past the worker's step is then an SSP/ASP push count,
// not a BSP step closed without it); nullopt while the job is in BSP.
std::optional<Consistency> LeftBsp(SchedulerClient& scheduler,
                                   absl::Duration wait);

// Under --consistency auto, for an SSP/ASP worker at `clock` whose lease
// was `refused` (OUT_OF_RANGE): where the job went back to BSP, if the
// view says it did at a step past `clock` (waiting up to a minute for such
// a view when the ledger's answer says so: kBeforeBackToBsp); nullopt
// otherwise (every sample of the job is applied). The worker goes on from
// `step`; its job step (the learning-rate schedule's, the one --steps
// counts) is a step minus `schedule_offset` (View.schedule_offset).
struct BspReturn {
  int64_t step = 0;
  int64_t schedule_offset = 0;
};
std::optional<BspReturn> BackInBsp(SchedulerClient& scheduler, int64_t clock,
                                   const absl::Status& refused);

// Leases this worker's samples for `step` (BSP: the job's step; SSP/ASP:
// this worker's clock), waiting first, up to `timeout`, for a view that
// lists this worker (a fenced worker registers again); NOT_FOUND and
// UNAVAILABLE answers are asked again until then (and, while the view
// shows a switch back to BSP under way, for kBackToBspDrain from the last
// one: the switch waits for every lease out). With `ahead`, a lease
// held there is used first and later steps are leased ahead into it
// (cluster/lease_ahead.h): with enough held, a step does not wait for a
// scheduler that is away. Errors: LeaseWork's (OUT_OF_RANGE: a BSP step
// already applied, or every sample of an SSP/ASP job; FAILED_PRECONDITION:
// another job's ledger, too many workers), DEADLINE_EXCEEDED.
inline constexpr absl::Duration kBackToBspDrain = absl::Minutes(10);
absl::StatusOr<StepWork> LeaseStepWork(
    SchedulerClient& scheduler, int64_t step, const v1::LedgerJob& job,
    absl::Duration timeout = absl::Seconds(60), LeaseAhead* ahead = nullptr);

// Whether `status`, the outcome of a step computed in `computed`, means the
// step is to be computed again in a newer view; waits for that view first.
// True for ABORTED (the live workers changed), and for FAILED_PRECONDITION
// when the newer view no longer lists `computed.member` (its lease ran out
// and it was fenced). False for everything else.
bool RedoInNewerView(SchedulerClient& scheduler, const absl::Status& status,
                     const StepView& computed,
                     absl::Duration timeout = absl::Seconds(60));

// BSP rollbacks (View.generation: a server restarted from its snapshot and
// the whole job went back to a step). A worker's step loop keeps the
// generation its steps are computed in and stamps it on every push and
// pull (StepStamp::generation); at the top of each step it calls
// AdoptRollback, which, when the view is in a newer generation, adopts it
// and returns the step to go on from (the servers hold its weights).
std::optional<int64_t> AdoptRollback(SchedulerClient& scheduler,
                                     uint64_t* generation);
// After an ABORTED pull with no step of this worker's to redo (the job
// rolled back under it): waits up to `timeout` for the view of the newer
// generation. False if it does not come.
bool AwaitRollback(SchedulerClient& scheduler, uint64_t generation,
                   absl::Duration timeout = absl::Seconds(60));

}  // namespace strata

#endif  // STRATA_CLUSTER_WORKER_SESSION_H_
