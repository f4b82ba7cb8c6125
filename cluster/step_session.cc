#include "cluster/step_session.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/sum_of_squares.h"
#include "spdlog/spdlog.h"

namespace strata {
StepSession::StepSession(StepSessionOptions options)
    : options_(std::move(options)), leases_(options_.lease_ahead) {}

StepSession::~StepSession() { (void)CollectCommit(); }

absl::StatusOr<std::unique_ptr<StepSession>> StepSession::Create(
    StepSessionOptions options) {
  if (options.model.tensors.empty())
    return absl::InvalidArgumentError("the model has no tensors");
  if (!(options.grad_clip >= 0) || !std::isfinite(options.grad_clip))
    return absl::InvalidArgumentError("grad_clip must be finite and >= 0");
  options.scheduler.role = v1::ROLE_WORKER;
  std::unique_ptr<StepSession> s(new StepSession(std::move(options)));
  const StepSessionOptions& o = s->options_;
  STRATA_ASSIGN_OR_RETURN(
      s->session_, JoinAsWorker(o.scheduler, o.min_workers, o.join_timeout));
  s->consistency_ = s->session_.consistency;
  STRATA_ASSIGN_OR_RETURN(s->ps_,
                          PsClient::Create(o.ps, s->session_.scheduler.get()));
  // The generation the model's state is in, read before the first pulls.
  s->generation_ = s->session_.scheduler->view().generation();
  s->schedule_offset_ = s->session_.scheduler->view().schedule_offset();
  STRATA_RETURN_IF_ERROR(s->ps_->RegisterModel(o.model));
  return s;
}

absl::Status StepSession::SetJob(const StepJob& job) {
  if (job.steps < 1 || job.batch < 1 || job.samples_per_epoch < 1) {
    return absl::InvalidArgumentError(
        "steps, batch and samples_per_epoch must be >= 1");
  }
  if (job.batch < options_.min_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", job.batch, " cannot be shared by ",
                     options_.min_workers, " workers"));
  }
  job_ = LedgerJobFor(ps_->plan(), job.steps, job.batch, job.samples_per_epoch,
                      job.seed);
  steps_ = job.steps;
  return absl::OkStatus();
}

absl::Status StepSession::CollectCommit() {
  return commit_.valid() ? commit_.get() : absl::OkStatus();
}

absl::Status StepSession::PullAll(absl::Span<float* const> weights,
                                  absl::Span<const int> skip, bool last,
                                  std::vector<OpHandle>* pulls) {
  const bool bsp = consistency_.mode == Consistency::kBsp;
  pull_.clock = last && !bsp ? -1 : step_;
  pull_.min_version = bsp ? static_cast<uint64_t>(step_) : 0;
  pull_.stamp = StepStamp{.epoch = prev_epoch_, .generation = generation_};
  // The final weights in fp32 whatever the pulls' dtype (bf16 pulls are
  // for computing with).
  if (last) pull_.stamp.dtype = v1::DTYPE_F32;
  std::vector<bool> skipped(weights.size(), false);
  for (int i : skip) {
    if (!last && i >= 0 && i < static_cast<int>(weights.size())) {
      skipped[i] = true;
    }
  }
  auto send = [&] {
    pulls->clear();
    for (size_t i = 0; i < weights.size(); ++i) {
      if (skipped[i]) continue;
      for (OpHandle& op :
           ps_->PullTensorAsync(static_cast<int>(i), weights[i], pull_.clock,
                                pull_.min_version, 0, pull_.stamp))
        pulls->push_back(std::move(op));
    }
    return WaitAll(*pulls);
  };
  absl::Status pulled = send();
  const bool during_commit = commit_.valid();
  const absl::Status committed = CollectCommit();
  if (during_commit && committed.ok() && absl::IsDeadlineExceeded(pulled)) {
    // The pulls' wait at the gate (max_wait) counted the whole commit: a
    // long one outlasts it. It is done now: pull again.
    pulled = send();
  }
  // The servers answer ABORTED to pulls of a step whose commit failed:
  // the commit's own error says why. (A commit that failed while every
  // chunk closed the step all the same, its retry having applied, leaves
  // the pulls OK.)
  return pulled.ok() || committed.ok() ? pulled : committed;
}

StepSession::PullOutcome StepSession::Pull(absl::Span<float* const> weights,
                                           absl::Span<const int> skip,
                                           bool last, absl::Status* failed,
                                           uint64_t* min_read) {
  std::vector<OpHandle> pulls;
  if (absl::Status s = PullAll(weights, skip, last, &pulls); !s.ok()) {
    // Without a previous step to redo, ABORTED means the job rolled back.
    if (absl::IsAborted(s) && prev_epoch_ == 0 &&
        AwaitRollback(*session_.scheduler, generation_, options_.timeout)) {
      return PullOutcome::kAgain;
    }
    // (FAILED_PRECONDITION: the commit of step-1, collected with these
    // pulls, found this worker fenced; RedoInNewerView redoes only then.)
    if (step_ > 0 && (absl::IsAborted(s) || absl::IsFailedPrecondition(s)) &&
        RedoInNewerView(*session_.scheduler, s, last_, options_.timeout)) {
      ps_->ForgetPushErrors();  // the pushes they came from: not applied
      --step_;  // step-1 is redone in the new view (or the job rolled back)
      prev_epoch_ = 0;
      return PullOutcome::kAgain;
    }
    *failed = s;
    return PullOutcome::kFailed;
  }
  // Nothing pulled (every tensor skipped): nothing says the job is past
  // the step.
  *min_read = pulls.empty() ? static_cast<uint64_t>(step_) : UINT64_MAX;
  for (const OpHandle& op : pulls)
    *min_read = std::min(*min_read, op.version());
  return PullOutcome::kPulled;
}

bool StepSession::StillBsp(absl::Duration wait) {
  if (consistency_.mode != Consistency::kBsp) return false;
  if (std::optional<Consistency> now = LeftBsp(*session_.scheduler, wait)) {
    spdlog::info("strata worker: the job runs {} from step {} (was {})",
                 now->ToString(), step_, consistency_.ToString());
    consistency_ = *now;
  }
  return consistency_.mode == Consistency::kBsp;
}

absl::StatusOr<std::optional<StepWork>> StepSession::Lease() {
  bool bsp = consistency_.mode == Consistency::kBsp;
  absl::StatusOr<StepWork> work = LeaseStepWork(
      *session_.scheduler, step_, *job_, options_.timeout, &leases_);
  if (absl::IsOutOfRange(work.status())) {
    // BSP: the job applied this step without us (we were fenced or joined
    // late): go on from the next one. SSP/ASP: every sample is applied:
    // read the final weights.
    bsp = bsp && StillBsp(absl::ZeroDuration());
    if (bsp) ++step_;
    std::optional<BspReturn> back;
    if (!bsp) back = BackInBsp(*session_.scheduler, step_, work.status());
    if (back.has_value()) {
      // The job went back to BSP (--consistency auto): from its step.
      spdlog::info("strata worker: the job runs bsp from step {} (was {})",
                   back->step, consistency_.ToString());
      consistency_ = Consistency();
      step_ = back->step;
      schedule_offset_ = back->schedule_offset;
    }
    finished_ = !bsp && !back.has_value();
    prev_epoch_ = 0;
    ps_->ForgetPushErrors();  // carried from pushes of a step not ours
    return std::nullopt;
  }
  if (!work.ok()) return work.status();
  if (work->view.generation != generation_) return std::nullopt;  // adopt it
  if (const Consistency now = LeasedMode(*work, session_.scheduler->view());
      now.ToString() != consistency_.ToString()) {
    spdlog::info("strata worker: the job runs {} from step {} (was {})",
                 now.ToString(), step_, consistency_.ToString());
    consistency_ = now;
    // Back to BSP by a lease of its step: job steps count from its offset.
    if (work->bsp) schedule_offset_ = work->schedule_offset;
  }
  return std::optional<StepWork>(*std::move(work));
}

absl::StatusOr<std::optional<StepWork>> StepSession::Begin(
    absl::Span<float* const> weights, absl::Span<const int> skip) {
  if (!job_)
    return absl::FailedPreconditionError("SetJob must come before Begin");
  if (weights.size() != options_.model.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Begin takes ", options_.model.tensors.size(),
                     " weight buffers (one per tensor), not ", weights.size()));
  }
  if (work_) return absl::FailedPreconditionError("End the step first");
  if (done_) return std::nullopt;
  for (;;) {
    // Read each turn: a lease may switch it (--consistency auto).
    const bool bsp = consistency_.mode == Consistency::kBsp;
    if (std::optional<int64_t> back =
            AdoptRollback(*session_.scheduler, &generation_)) {
      // The last commit belongs to the old generation.
      (void)CollectCommit();
      ps_->ForgetPushErrors();
      step_ = *back;
      prev_epoch_ = 0;
      // A restarted server that held no snapshot lacks the chunks.
      STRATA_RETURN_IF_ERROR(ps_->RegisterModelAgain());
      continue;
    }
    const bool last = bsp ? job_step() >= steps_ : finished_;
    absl::Status failed;
    uint64_t min_read = 0;
    const absl::Time pull_start = absl::Now();
    const PullOutcome pulled = Pull(weights, skip, last, &failed, &min_read);
    pull_s_ = absl::ToDoubleSeconds(absl::Now() - pull_start);
    switch (pulled) {
      case PullOutcome::kAgain:
        continue;
      case PullOutcome::kFailed:
        return failed;
      case PullOutcome::kPulled:
        break;
    }
    if (last) {
      done_ = true;
      return std::nullopt;
    }
    if (bsp && min_read > static_cast<uint64_t>(step_) &&
        StillBsp(absl::Seconds(1))) {
      // The job is past this step (we joined late): go on from there.
      step_ = std::min<int64_t>(static_cast<int64_t>(min_read),
                                steps_ + schedule_offset_);
      prev_epoch_ = 0;
      ps_->ForgetPushErrors();
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(std::optional<StepWork> work, Lease());
    if (!work) continue;
    ps_->ForgetDeferred(step_);  // an earlier attempt's counts
    {
      absl::MutexLock l(&mu_);
      pushes_.clear();
      square_sum_ = 0;
    }
    work_ = std::move(work);
    handed_out_ = absl::Now();
    return work_;
  }
}

absl::Status StepSession::PullMore(absl::Span<const int> tensors,
                                   absl::Span<float* const> weights) {
  if (!work_) {
    return absl::FailedPreconditionError(
        "no step is under way: Begin hands one out");
  }
  if (tensors.size() != weights.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tensors.size(), " tensors and ", weights.size(),
                     " weight buffers: one buffer a tensor"));
  }
  const int n = static_cast<int>(options_.model.tensors.size());
  std::vector<OpHandle> pulls;
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (tensors[k] < 0 || tensors[k] >= n) {
      return absl::InvalidArgumentError(absl::StrCat("no tensor ", tensors[k]));
    }
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    for (OpHandle& op :
         ps_->PullTensorAsync(tensors[k], weights[k], pull_.clock,
                              pull_.min_version, 0, pull_.stamp)) {
      pulls.push_back(std::move(op));
    }
  }
  // A BSP read past the step is no error: a step redone after it closed
  // on some chunks reads those chunks closed (Begin judges the step by
  // the least version it read, as the trainer does).
  return WaitAll(pulls);
}

absl::Status StepSession::PushZero(int tensor, int priority) {
  return Send(tensor, nullptr, priority);
}

absl::Status StepSession::Push(int tensor, const float* grad, int priority) {
  return Send(tensor, grad, priority);
}

absl::Status StepSession::Send(int tensor, const float* grad, int priority) {
  // Begin and End are in the caller's thread; work_ does not change while
  // pushes may come.
  if (!work_) {
    return absl::FailedPreconditionError(
        "no step is under way: Begin hands one out");
  }
  if (tensor < 0 || tensor >= static_cast<int>(options_.model.tensors.size()))
    return absl::InvalidArgumentError(absl::StrCat("no tensor ", tensor));
  const StepWork& w = *work_;
  const StepStamp stamp{
      .epoch = w.stamp_epoch,
      .first_sample = static_cast<uint64_t>(w.units[0].first()),
      .generation = generation_,
      .deferred = options_.grad_clip > 0,
      .zero = grad == nullptr,
      // A lease is never above the batch; under BSP the servers ignore it.
      .async_lr_scale = options_.async_lr_share
                            ? static_cast<float>(std::min(
                                  1.0, static_cast<double>(w.samples) /
                                           static_cast<double>(job_->batch())))
                            : 0.0f};
  const double sq =
      options_.grad_clip > 0 && grad != nullptr
          ? SumOfSquares(grad, static_cast<int64_t>(
                                   options_.model.tensors[tensor].numel()))
          : 0;
  std::vector<OpHandle> ops = ps_->PushTensorAsync(
      tensor, grad, step_, static_cast<uint64_t>(w.samples), priority, stamp);
  absl::MutexLock l(&mu_);
  square_sum_ += sq;
  for (OpHandle& op : ops) pushes_.push_back(std::move(op));
  return absl::OkStatus();
}

void StepSession::Abandon() {
  if (!work_) return;
  work_.reset();
  std::vector<OpHandle> pushes;
  {
    absl::MutexLock l(&mu_);
    pushes.swap(pushes_);
  }
  (void)WaitAll(pushes);  // they read the caller's buffers
  ps_->ForgetDeferred(step_);
  ps_->ForgetPushErrors();
}

absl::StatusOr<bool> StepSession::End() {
  if (!work_) return absl::FailedPreconditionError("no step was begun");
  const StepWork w = *std::move(work_);
  work_.reset();
  const double compute_s =
      std::max(absl::ToDoubleSeconds(absl::Now() - handed_out_), 1e-9);
  std::vector<OpHandle> pushes;
  double sq = 0;
  {
    absl::MutexLock l(&mu_);
    pushes.swap(pushes_);
    sq = square_sum_;
  }
  absl::Status s = WaitAll(pushes);
  const bool bsp = consistency_.mode == Consistency::kBsp;
  // BSP with LAMB or Adafactor: the update of a tensor cut into several
  // chunks waits for sums over it, which the workers drive (ReduceStep).
  const bool reduce = bsp && ps_->needs_reduce();
  const bool clip = options_.grad_clip > 0;
  if (s.ok() && (clip || reduce)) {
    last_norm_ = std::sqrt(sq);
    // In double: a norm past float's range still gives a positive factor.
    const float scale =
        clip && last_norm_ > options_.grad_clip
            ? static_cast<float>(options_.grad_clip / last_norm_)
            : 1.0f;
    if (bsp) {
      // The next pulls wait at the gate for this step to close, chunk by
      // chunk: they go out while the servers apply the commit (Begin
      // collects its answer with theirs).
      const StepStamp stamp{.epoch = w.stamp_epoch, .generation = generation_};
      commit_ = std::async(std::launch::async,
                           [this, step = step_, scale, clip, stamp] {
                             if (clip) {
                               STRATA_RETURN_IF_ERROR(ps_->Commit(step, scale));
                             }
                             return ps_->ReduceStep(step, stamp);
                           });
    } else {
      // SSP/ASP pulls do not wait for this worker's step: they would read
      // the weights without it.
      s = ps_->Commit(step_, scale);
    }
  }
  if (!s.ok()) {
    if (RedoInNewerView(*session_.scheduler, s, w.view, options_.timeout)) {
      ps_->ForgetPushErrors();
      return false;
    }
    return s;
  }
  const double rate = static_cast<double>(w.samples) / compute_s;
  speed_ = speed_ == 0 ? rate : 0.7 * speed_ + 0.3 * rate;
  last_ = w.view;
  prev_epoch_ = w.stamp_epoch;
  session_.scheduler->SetProgress(step_ + 1, speed_);
  session_.scheduler->SetWire(ps_->WirePaths());
  // The caller's time from Begin to End computes (scheduler/step_times.h).
  session_.scheduler->NoteStep(step_, static_cast<uint64_t>(w.samples),
                               compute_s, pull_s_);
  ++step_;
  return true;
}

absl::Status StepSession::Leave() {
  (void)CollectCommit();  // the last step's commit is answered first
  return session_.scheduler->Leave();
}

}  // namespace strata
