// The step loop's state (trainer/trainer.cc runs it, a step at a time in
// trainer/trainer_step.cc; trainer/trainer_compute.cc computes a step;
// trainer/trainer_sync.cc syncs it with the servers and the all-reduce
// group). Private to trainer/.
#ifndef STRATA_TRAINER_TRAINER_IMPL_H_
#define STRATA_TRAINER_TRAINER_IMPL_H_

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "cluster/worker_session.h"
#include "collective/communicator.h"
#include "collective/grad_buckets.h"
#include "common/consistency.h"
#include "common/host_cpu.h"
#include "data/dataset.h"
#include "model/model.h"
#include "trainer/grad_accumulator.h"
#include "trainer/progress.h"
#include "trainer/trainer.h"
#include "trainer/worker_metrics.h"

namespace strata {

// One worker's training state and step.
class Trainer {
 public:
  Trainer(const TrainerOptions& o, std::unique_ptr<Model> gpt,
          std::unique_ptr<TokenDataset> data,
          std::unique_ptr<SchedulerClient> scheduler,
          std::unique_ptr<PsClient> ps, Consistency mode, int rank, int workers)
      : o_(o),
        gpt_(std::move(gpt)),
        data_(std::move(data)),
        scheduler_(std::move(scheduler)),
        ps_(std::move(ps)),
        mode_(mode),
        rank_(rank),
        workers_(workers) {
    if (o.metrics != nullptr)
      metrics_ = std::make_unique<WorkerMetrics>(*o.metrics);
    leases_ = LeaseAhead(absl::Seconds(o.lease_ahead_s));
    InitExperts();
    // Each worker its own draws (jitter), the same for the same seed.
    slowdown_rng_.seed(o.seed * 0x9E3779B97F4A7C15ull +
                       scheduler_->member_id());
  }

  absl::Status Run();

 private:
  // A step computed and pushed, recorded once its commit is answered.
  struct StepRecord {
    StepMetrics m;
    int64_t samples = 0;
    double compute_s = 0;
    double sync_s = 0;
    int64_t expert_pulled = 0, expert_pushed = 0;  // floats (sparse_)
  };
  // The step loop's state between steps (Run).
  struct Loop {
    int64_t step = 0;         // the next step to compute
    StepView last;            // the view the previous step was computed in
    uint64_t prev_epoch = 0;  // its stamp epoch; 0: unknown (no redo check)
    // SSP/ASP: the job ends when the ledger has seen every sample applied,
    // which may take this worker past --steps clocks (it took over the
    // units of a worker that died): then the final weights are pulled.
    bool finished = false;
    // The last step computed, until the next step's pulls answer for its
    // commit. Set exactly when there is a previous step this loop could
    // redo.
    std::optional<StepRecord> unanswered;
    double tokens_per_s = 0;  // smoothed
    absl::Time start;
    Progress* progress = nullptr;
  };
  // Where a step (Step) leaves the loop: the transitions of the worker's
  // state machine.
  enum class Next {
    kStep,          // computed and pushed: on to the next step
    kAgain,         // this step again (a rollback to adopt first, or a
                    // redo with a newer view's shares)
    kRedoPrevious,  // step-1 again, with the new view's shares
    kSkip,          // the job is past this step without us: on from there
    kFinal,         // SSP/ASP: every sample applied: the final weights next
    kDone,          // the final weights are in
  };
  // What a step computed while its pulls were in flight.
  struct Early {
    std::optional<absl::StatusOr<StepWork>> leased;
    std::optional<absl::StatusOr<double>> computed;
    float grad_norm = 0;
  };

  bool bsp() const { return mode_.mode == Consistency::kBsp; }
  // The job step of a BSP step or SSP/ASP clock: what --steps, the
  // learning-rate schedule, evaluation and the metrics count. The same
  // until an --consistency auto job goes back to BSP, whose steps start
  // past every chunk's version (View.schedule_offset).
  int64_t JobStep(int64_t step) const { return step - schedule_offset_; }
  // Sets sparse_ and expert_floats_ from the options and the model.
  void InitExperts();
  // Whether rank 0 evaluates after `step` (--eval_every, the last step).
  bool EvalDue(int64_t step) const;
  void LogStart() const;
  // The step this worker starts at (FirstStep, after any rollback under
  // way); FAILED_PRECONDITION when the job is done already,
  // INVALID_ARGUMENT for all-reduce sync without BSP.
  absl::StatusOr<int64_t> Join();
  // Leaves between steps (o_.stop).
  absl::Status Leave(Loop& loop);
  // Adopts the scheduler's rollback, if the view is in a newer generation:
  // the loop goes on from its step. Errors: re-registering the model.
  absl::StatusOr<bool> TakeRollback(Loop& loop);
  // One step from its pulls to its pushes (trainer/trainer_step.cc).
  absl::StatusOr<Next> Step(Loop& loop);
  // Leases and computes `step` while its pulls are in flight, if the
  // options let forward run over the pulls.
  Early ComputeDuringPull(int64_t step);
  // What the finished pulls say: a transition, or nothing (the step goes
  // on); errors end the loop.
  absl::StatusOr<std::optional<Next>> JudgePull(
      Loop& loop, const absl::StatusOr<uint64_t>& pulled, bool last_pull);
  // Notes a computed step: its metrics, held in loop.unanswered until its
  // commit is answered; the loop moves on to the next step.
  void NoteStep(Loop& loop, const StepWork& work, double loss, float grad_norm,
                absl::Time t0);
  // StepTiming.idle_s of a step of `step_s` that waited `wait_s`: a GPU
  // worker's device idles through its wait (so do a CPU worker's cores
  // with waits_idle); a CPU worker's are the host's or its CPU quota's
  // (common/host_cpu.h), idle in their idle share since step_cpu_
  // (nullopt where that cannot be read or no tick passed).
  bool MeasuresCpu() const;
  std::optional<double> IdleSeconds(double wait_s, double step_s) const;

  // The pulls of one step's weights, from StartPull to FinishPull.
  struct Pull {
    int64_t clock = 0;        // BSP: the step; -1: no gate
    uint64_t prev_epoch = 0;  // the epoch step-1 was computed in (0: unknown)
    bool final = false;       // the final weights: in fp32 whatever pull_bf16
    std::vector<std::vector<OpHandle>> ops;  // per parameter
    bool finished = true;
    absl::StatusOr<uint64_t> result = 0;  // FinishPull's, once finished
    // A wait of the model's pass (AwaitParam) failed: the step is computed
    // again if FinishPull succeeds (its second try after a gate deadline).
    bool broke_pass = false;
    absl::Duration waited;          // this worker's time sending and waiting
    absl::Duration waited_in_pass;  // of which in the model's waits
    int64_t expert_floats = 0;      // of the experts pulled (sparse_)
  };
  // Sends the pulls of the weights for `clock` (the step's, or -1: the
  // final weights without the gate), first layers first: forward needs
  // them first. `final`: the weights the job ends with.
  void StartPull(int64_t clock, uint64_t prev_epoch, bool final);
  // The step's pulls: with sparse_, an expert's only if the previous step
  // used it (PullsAhead); `again`: every pull sent before, once more.
  void SendPulls(bool again = false);
  void SendPull(int i);
  // Whether the step's pulls take every expert ahead of routing.
  bool PullsAllExperts() const;
  // Waits for parameter i's pulls (the model's param-wait hook), sending
  // them first if they were not (an expert the router chose).
  absl::Status AwaitParam(int i);
  // The model's params-wanted hook: sends the pulls not sent yet.
  void WantParams(absl::Span<const int> params);
  // Waits for every pull, failed or not (one in flight would write into
  // param_data while a redone step computes), and for step-1's commit
  // (commit_), which ran meanwhile. Returns the smallest chunk version
  // read. Later calls return the first one's result.
  absl::StatusOr<uint64_t> FinishPull();
  // Whether the finished pull lets this worker push `step`: it succeeded
  // and (BSP) the step is still open. Finishes the pull first.
  bool PullAllowsStep(int64_t step);
  void SetStamp(const StepWork& work);
  // Takes the mode `work` was leased under as the job's (--consistency
  // auto switches it live; cluster/worker_session.h LeasedMode).
  void FollowMode(const StepWork& work, int64_t step);
  // Under --consistency auto, before BSP's rules judge a pull or a lease:
  // the view's mode once the job has left BSP (LeftBsp, waiting up to
  // `wait`). Returns whether the worker is still in BSP.
  bool StillBsp(int64_t step, absl::Duration wait);
  // Under --consistency auto, for an SSP/ASP lease refused as past the
  // job: whether the job went back to BSP (BackInBsp); if so, the worker
  // follows it, at the step it went back at.
  bool BackToBsp(Loop& loop, const absl::Status& refused);
  // The step to start at: where the servers are (0 for a new job; later
  // for a worker that joins a running one or restarts).
  absl::StatusOr<int64_t> FirstStep();
  // Computes `work` of `step` and pushes the gradients stamped with
  // stamp_. Sets compute_s_ to the forward and backward time. With pull_
  // still in flight, forward waits for each layer's weights, and nothing is
  // pushed unless PullAllowsStep (else ABORTED, or the wait's error).
  absl::StatusOr<double> ComputeAndPush(int64_t step, const StepWork& work,
                                        float* grad_norm);
  // The simulated straggler's sleep after a step's computation of
  // `computed` (TrainerOptions::slowdown).
  void SimulateSlowdown(int64_t step, absl::Duration computed);
  // One step's computation and sync as ComputeAndPush runs it
  // (trainer/trainer_compute.cc).
  struct Pass {
    int64_t step = 0;
    int B = 0;            // this worker's samples
    uint64_t total = 0;   // the step's, over the all-reduce group (else B)
    float share = 1;      // B / total
    bool reduce = false;  // all-reduce sync
    bool clip = false;
    bool stream = false;      // each gradient pushed as backward finishes it
    std::vector<int> pieces;  // micro-batch sizes
    std::optional<bool> may_push;  // PullAllowsStep, once asked
    bool reducing = false;         // all-reduces started
    std::vector<OpHandle> ops;     // pushes in flight
    // Each parameter's sum of squared gradients, where taken in backward.
    std::vector<std::optional<double>> square_sums;
    // sparse_: per parameter, whether an earlier micro-batch used it (an
    // expert its tokens reached), and the experts' floats pushed.
    std::vector<char> used;
    int64_t expert_floats_pushed = 0;
  };
  // Pushes parameter `param`'s gradient, or a zero push for an expert
  // no token of the step reached (ZeroPush).
  absl::Status PushParam(Pass& p, int param, uint64_t samples);
  bool ZeroPush(const Pass& p, int param) const;
  // sparse_: notes which experts the last pass used, into p.used.
  void NoteUsed(Pass& p);
  // The step's samples into tokens_ and targets_.
  void LoadBatch(const StepWork& work);
  // How the step is synced (joining the all-reduce group for it), and the
  // stamp its pushes carry.
  absl::StatusOr<Pass> PlanPass(int64_t step, const StepWork& work);
  // Forward and backward over the micro-batches, the last one's gradients
  // pushed or reduced as backward finishes each. Returns the mean loss.
  absl::StatusOr<double> ForwardBackward(Pass& p);
  // The grad-ready hook when streaming: completes, measures and pushes.
  void StreamGrad(Pass& p, int param);
  // Adds the kept micro-batches' gradients into parameter `param`'s.
  void FinishParam(const Pass& p, int param);
  // Scales by the share and hands the gradient to the all-reduce buckets.
  void ReduceParam(Pass& p, int param);
  // Whether the pulls let this worker push the step (asked once).
  bool MayPush(Pass& p);
  // After a failed pass: waits for the pushes in flight and aborts the
  // all-reduce group's step.
  void Abandon(Pass& p);
  // Completes the gradients (accumulated, reduced) and returns the factor
  // clipping scales them by; *grad_norm is their norm.
  absl::StatusOr<float> FinishGradients(Pass& p, float* grad_norm);
  // Pushes what was not streamed, waits for every push, and commits
  // (deferred pushes; under BSP in the background, beside the next pulls).
  absl::Status PushAndCommit(Pass& p, float scale);
  // All-reduce sync: the group of the workers `work` was split among
  // (formed again when they change), and the step's sample count over all
  // of them. Errors come back ABORTED, so the step is redone in a newer
  // view (a worker that died leaves the group and the view).
  absl::StatusOr<uint64_t> JoinGroupForStep(const StepWork& work);
  // Waits for the all-reduces of a step (buckets_); the first error as
  // ABORTED.
  absl::Status WaitReduced();
  absl::StatusOr<double> EvalLoss();
  absl::Status WriteOutputs();
  // Counts the step in the metrics, if any, and writes its progress line.
  void RecordStep(const StepRecord& r, Progress& progress);

  const TrainerOptions& o_;
  std::unique_ptr<Model> gpt_;
  std::unique_ptr<TokenDataset> data_;
  std::unique_ptr<SchedulerClient> scheduler_;
  std::unique_ptr<PsClient> ps_;
  Consistency mode_;
  bool auto_consistency_ = false;  // --consistency auto: mode_ may switch
  int64_t schedule_offset_ = 0;    // JobStep's
  int rank_;
  int workers_;
  StepStamp stamp_;          // of the step being computed
  uint64_t generation_ = 0;  // the rollback generation steps are computed in
  v1::LedgerJob job_;        // this job, as the data ledger knows it
  LeaseAhead leases_;        // steps leased ahead (through a scheduler outage)
  double speed_ = 0;         // samples/s computing, smoothed
  double compute_s_ = 0;
  // Where a CPU worker's processor time is counted, and its reading when
  // the current step began (IdleSeconds).
  const CpuSource cpu_source_ = FindCpuSource();
  absl::StatusOr<CpuTime> step_cpu_ = absl::UnavailableError("no step");
  double sync_s_ = 0;  // after backward, until the step is pushed
  // MoE with o_.sparse_experts and ps sync: experts move only where
  // routed (TrainerOptions::sparse_experts).
  bool sparse_ = false;
  int64_t expert_floats_ = 0;  // of every expert, one copy
  // Per parameter: the last step's pass used it (an expert; empty before
  // the first step, when every expert is pulled).
  std::vector<char> used_last_;
  // The last step's expert floats pulled and pushed.
  int64_t expert_pulled_ = 0, expert_pushed_ = 0;
  std::mt19937_64 slowdown_rng_;  // jitter's draws
  // BSP with deferred pushes: the step's commit, in flight while the next
  // pulls wait at the servers' gates for it to apply.
  std::future<absl::Status> commit_;
  Pull pull_;
  int64_t commit_step_ = -1;                       // the step commit_ commits
  std::unique_ptr<WorkerMetrics> metrics_;         // null: no metrics
  std::unique_ptr<ExpertMetrics> expert_metrics_;  // null: no metrics or MoE
  std::vector<int32_t> tokens_, targets_;
  GradAccumulator accumulator_;
  // All-reduce sync: the group and the (generation, workers epoch) it was
  // formed for.
  std::unique_ptr<Communicator> comm_;
  std::string comm_key_;
  std::unique_ptr<GradBuckets> buckets_;  // over comm_
};

}  // namespace strata

#endif  // STRATA_TRAINER_TRAINER_IMPL_H_
