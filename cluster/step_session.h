// A worker's step protocol over the parameter servers and the data ledger,
// for any model given as a list of tensors: each step pulls the weights
// (through the consistency gate), leases its samples, pushes the gradients
// the caller computed, and commits. A step whose view was overtaken is
// handed out again (redo); a rollback hands out the step the job went back
// to. The caller sees only steps to compute:
//
//   STRATA_ASSIGN_OR_RETURN(auto session, StepSession::Create(options));
//   for (;;) {
//     STRATA_ASSIGN_OR_RETURN(std::optional<StepWork> work,
//                             session->Begin(weights));
//     if (!work) break;  // every sample applied; `weights` are the final
//     ... compute the gradient of work->units into grads[i] ...
//     for (int i = n - 1; i >= 0; --i) session->Push(i, grads[i]);
//     STRATA_ASSIGN_OR_RETURN(bool applied, session->End());
//   }
//   session->Leave();
//
// The toy worker (examples/toy/toy_worker.cc) and the Python package (python/)
// run their steps through it. The GPT trainer (trainer/trainer.cc) keeps its
// own loop, which also overlaps pulls with forward.
#ifndef STRATA_CLUSTER_STEP_SESSION_H_
#define STRATA_CLUSTER_STEP_SESSION_H_

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "cluster/worker_session.h"
#include "common/consistency.h"

namespace strata {

struct StepSessionOptions {
  // The scheduler to join (role is set to ROLE_WORKER) and the servers'
  // client options; both take their TLS credentials from here.
  SchedulerClientOptions scheduler;
  PsClientOptions ps;
  // Wait until this many workers are live, up to join_timeout, then start.
  int min_workers = 1;
  absl::Duration join_timeout = absl::Seconds(60);
  // The model as the servers hold it; registered at Create.
  ModelSpec model;
  // Clip each step's gradient (this worker's) to this global L2 norm (0:
  // off). The servers hold the pushes until End sends the factor, so
  // pushes still go out as the gradients are ready.
  float grad_clip = 0;
  // SSP/ASP: each push's learning rate times this worker's share of the
  // step's batch (PushRequest.async_lr_scale; `--async_lr share`), so that
  // a step's pushes move the weights about as far as one BSP update;
  // false: the whole rate. BSP servers ignore it.
  bool async_lr_share = false;
  // How long Begin and End wait for the scheduler's answers and views.
  absl::Duration timeout = absl::Seconds(60);
  // Lease steps ahead to train through a scheduler outage this long
  // (cluster/lease_ahead.h; zero: lease each step as it comes).
  absl::Duration lease_ahead = absl::Seconds(30);
};

// The job's data: `steps` steps of `batch` samples out of a training set
// of `samples_per_epoch` samples, in the order of `seed` (the ledger hands
// out global sample indices; sample g is item ShuffledIndex(g, n, seed)
// of the set, data/dataset.h).
struct StepJob {
  int64_t steps = 0;
  int64_t batch = 0;
  int64_t samples_per_epoch = 0;
  uint64_t seed = 0;
};

// Thread-safe except that Begin, End and Leave are called from one thread
// at a time (Push may come from any thread between Begin and End).
class StepSession {
 public:
  // Joins the job, connects to the servers and registers the model.
  // Errors: JoinAsWorker's, PsClient::Create's, RegisterModel's
  // (FAILED_PRECONDITION: the servers hold another model under these
  // names), INVALID_ARGUMENT for an empty model.
  static absl::StatusOr<std::unique_ptr<StepSession>> Create(
      StepSessionOptions options);
  ~StepSession();

  // Sets the job's data. REQUIRES: before the first Begin; INVALID_ARGUMENT
  // for a non-positive count or a batch smaller than the workers to start.
  absl::Status SetJob(const StepJob& job);

  // Pulls every tensor's weights for the next step into weights[i]
  // (tensor i's numel floats, written only by successful pulls) and leases
  // this worker's samples of it. The step to compute, with its samples and
  // this worker's place in the view; nullopt once the job is over (every
  // step applied under BSP, every sample under SSP/ASP): `weights` then
  // hold the final weights. A step is handed out again after End said it
  // was not applied, and an earlier one after a rollback.
  // `skip` names tensors not to pull now (a mixture's experts the caller
  // expects no token to reach: it pulls those it needs with PullMore);
  // the final weights are pulled whole whatever it says.
  absl::StatusOr<std::optional<StepWork>> Begin(
      absl::Span<float* const> weights, absl::Span<const int> skip = {});
  // Pulls tensors[k] into weights[k] for the step Begin handed out, as
  // its own pulls went (same clock, stamp and least version): a tensor
  // Begin skipped that the step turns out to need. FAILED_PRECONDITION
  // with no step handed out, INVALID_ARGUMENT for an index outside the
  // model or a count of buffers that is not the tensors'; the pulls'
  // errors. On an error the step's gradients must not be pushed: Abandon
  // it, and the next Begin hands it out again (and decides, by its own
  // pulls, whether the job went on without this worker).
  absl::Status PullMore(absl::Span<const int> tensors,
                        absl::Span<float* const> weights);
  // Pushes tensor `tensor`'s gradient for the step Begin handed out: the
  // mean over the step's samples. `grad` (numel floats) must stay valid
  // and unchanged until End (or Abandon) returns. With grad_clip, its sum
  // of squares is taken here (in the caller's thread).
  // FAILED_PRECONDITION with no step handed out, INVALID_ARGUMENT for an
  // index outside the model; nothing is sent then.
  absl::Status Push(int tensor, const float* grad, int priority = 0);
  // A zero push of tensor `tensor` (ps.proto PushRequest.zero): its
  // gradient is zero because none of the step's computation reached it
  // (an MoE expert no token was routed to). No payload goes; under BSP a
  // step whose every push of a chunk is zero leaves that chunk's weights
  // and optimizer state as they were. Errors as Push.
  absl::Status PushZero(int tensor, int priority = 0);
  // Gives up the step handed out (the caller could not push all of it):
  // waits for the pushes sent, forgets its deferred ones, and hands the
  // same step out at the next Begin. Under BSP the step does not close
  // without this worker's pushes: a caller that will not compute it again
  // leaves the job, and the others redo it without it.
  void Abandon();
  // Waits for the step's pushes (and, with grad_clip, sends the clipping
  // factor). True: the step is pushed (the next Begin goes on to the next
  // one, unless its pulls find this step overtaken: then it hands this one
  // out again, so a caller that counts applied steps counts at Begin);
  // false: it was overtaken by a newer view and the next Begin
  // hands it out again. Other failures are errors. Under BSP the clipping
  // factor's Commit is answered while the next Begin's pulls wait at the
  // gate (they go out as the servers apply it, as the GPT trainer's do).
  absl::StatusOr<bool> End();
  // Leaves the job (the scheduler hands this worker's samples to others).
  absl::Status Leave();

  // The gradient norm End clipped with (with grad_clip; else 0).
  double last_grad_norm() const { return last_norm_; }
  // The step Begin would hand out next (the job's under BSP, this
  // worker's clock under SSP/ASP), and its job step: the same until an
  // --consistency auto job goes back to BSP, whose steps start past every
  // chunk's version (View.schedule_offset).
  int64_t step() const { return step_; }
  int64_t job_step() const { return step_ - schedule_offset_; }
  const Consistency& consistency() const { return consistency_; }
  // This worker's rank in the view it joined (common/work_share.h).
  int join_rank() const { return session_.rank; }
  // The view the last applied step was computed in.
  const StepView& last_view() const { return last_; }
  PsClient& ps() { return *ps_; }
  SchedulerClient& scheduler() { return *session_.scheduler; }
  const ModelSpec& model() const { return options_.model; }

 private:
  explicit StepSession(StepSessionOptions options);
  // Push's and PushZero's (grad null).
  absl::Status Send(int tensor, const float* grad, int priority);
  // Begin's pull of every tensor for step_; what to do about a failure.
  enum class PullOutcome { kPulled, kAgain, kFailed };
  PullOutcome Pull(absl::Span<float* const> weights, absl::Span<const int> skip,
                   bool last, absl::Status* failed, uint64_t* min_read);
  // Sends the pulls (but those in `skip`, unless `last`) and waits for them
  // and the commit in flight: the pulls' status, or the commit's where it
  // explains their failure. Keeps what they were sent with in pull_.
  absl::Status PullAll(absl::Span<float* const> weights,
                       absl::Span<const int> skip, bool last,
                       std::vector<OpHandle>* pulls);
  // The answer of the commit in flight (OK when there is none).
  absl::Status CollectCommit();
  // Begin's lease of step_'s samples; nullopt: look again (step_ moved).
  // Under --consistency auto: whether the job is still in BSP, taking the
  // view's mode once it has left (cluster/worker_session.h LeftBsp).
  bool StillBsp(absl::Duration wait);
  absl::StatusOr<std::optional<StepWork>> Lease();

  StepSessionOptions options_;
  WorkerSession session_;
  Consistency consistency_;
  std::unique_ptr<PsClient> ps_;
  std::optional<v1::LedgerJob> job_;
  LeaseAhead leases_;  // steps leased ahead (through a scheduler outage)
  int64_t steps_ = 0;
  uint64_t generation_ = 0;  // the rollback generation of the weights
  int64_t step_ = 0;
  int64_t schedule_offset_ = 0;   // job_step's
  bool finished_ = false;         // SSP/ASP: every sample applied
  bool done_ = false;             // the final weights were pulled
  StepView last_;                 // the view the previous step was computed in
  uint64_t prev_epoch_ = 0;       // its stamp epoch; 0: unknown (no redo check)
  std::optional<StepWork> work_;  // the step handed out, until End
  // What Begin's last pulls were sent with (PullMore sends the same).
  struct PullArgs {
    int64_t clock = 0;
    uint64_t min_version = 0;
    StepStamp stamp;
  } pull_;
  absl::Time handed_out_;
  double pull_s_ = 0;  // the last Begin's pull of the weights
  double speed_ = 0;   // samples/s, smoothed, for the scheduler's shares
  double last_norm_ = 0;

  std::future<absl::Status> commit_;  // BSP: the last step's, in flight

  absl::Mutex mu_;  // Push from other threads
  std::vector<OpHandle> pushes_ ABSL_GUARDED_BY(mu_);
  double square_sum_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_CLUSTER_STEP_SESSION_H_
