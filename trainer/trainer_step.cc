// One turn of the worker's step loop (Trainer::Run), as a state machine:
// pull the step's weights (with the samples leased and forward started
// while they land) → judge the pulls (they may answer for the previous
// step's commit: redo it, or skip ahead, or finish) → lease the step's
// samples → compute and push (ComputeAndPush; the commit goes out with the
// next step's pulls) → note the step. A rollback or a change of the live
// workers leads to another step, never to an exit: the outcome (Next) says
// which.
#include <algorithm>
#include <optional>
#include <utility>

#include "common/status.h"
#include "optim/optimizer.h"
#include "spdlog/spdlog.h"
#include "trainer/trainer_impl.h"

namespace strata {

absl::StatusOr<Trainer::Next> Trainer::Step(Loop& loop) {
  const absl::Time t0 = absl::Now();
  if (MeasuresCpu()) step_cpu_ = ReadCpuTime(cpu_source_);
  // BSP: the weights at version `step` (step-1 closed). After the last
  // step, the final weights; SSP/ASP read those without the gate.
  const bool last_pull = bsp() ? JobStep(loop.step) >= o_.steps : loop.finished;
  StartPull(last_pull && !bsp() ? -1 : loop.step, loop.prev_epoch,
            /*final=*/last_pull);
  Early early;
  if (!last_pull) early = ComputeDuringPull(loop.step);
  absl::StatusOr<uint64_t> pulled = FinishPull();
  if (metrics_) {
    metrics_->pull_seconds.Observe(absl::ToDoubleSeconds(pull_.waited));
  }
  STRATA_ASSIGN_OR_RETURN(const std::optional<Next> after_pull,
                          JudgePull(loop, pulled, last_pull));
  if (after_pull.has_value()) return *after_pull;
  absl::StatusOr<StepWork> work =
      early.leased.has_value() ? *std::move(early.leased)
                               : LeaseStepWork(*scheduler_, loop.step, job_,
                                               absl::Seconds(60), &leases_);
  if (absl::IsOutOfRange(work.status())) {
    // BSP: the job applied this step without us (we were fenced or joined
    // late): go on from the next one. SSP/ASP: every sample is applied:
    // read the final weights.
    loop.prev_epoch = 0;
    if (!StillBsp(loop.step, absl::ZeroDuration())) {
      if (BackToBsp(loop, work.status())) return Next::kSkip;
      loop.finished = true;
      return Next::kFinal;
    }
    ++loop.step;
    return Next::kSkip;
  }
  STRATA_RETURN_IF_ERROR(work.status());
  if (work->view.generation != generation_) return Next::kAgain;  // adopt it
  if (!early.computed.has_value() || pull_.broke_pass) {
    // Not overlapped, or a wait broke the pass and the pulls' second try
    // (after the gate's deadline ran out during the commit) succeeded.
    FollowMode(*work, loop.step);
    SetStamp(*work);
    early.computed = ComputeAndPush(loop.step, *work, &early.grad_norm);
  }
  absl::StatusOr<double> loss = *std::move(early.computed);
  if (!loss.ok() && RedoInNewerView(*scheduler_, loss.status(), work->view)) {
    spdlog::info("strata worker: redoing step {}: {}", loop.step,
                 loss.status().ToString());
    if (metrics_) metrics_->redone.Add();
    ps_->ForgetPushErrors();  // the pushes they came from: not applied
    return Next::kAgain;
  }
  STRATA_RETURN_IF_ERROR(loss.status());
  NoteStep(loop, *work, *loss, early.grad_norm, t0);
  return Next::kStep;
}

Trainer::Early Trainer::ComputeDuringPull(int64_t step) {
  // Forward over the pulls: the step's samples are leased while they are
  // in flight and forward waits for each layer's weights (ComputeAndPush;
  // nothing is pushed unless the pulls let the step go on). Not under
  // all-reduce sync, where a worker joins the step's group only once its
  // pulls have said the step is its to compute.
  Early early;
  if (!o_.forward_during_pull || o_.sync != SyncMode::kPs) return early;
  early.leased =
      LeaseStepWork(*scheduler_, step, job_, absl::Seconds(60), &leases_);
  if (early.leased->ok() && (*early.leased)->view.generation == generation_) {
    FollowMode(**early.leased, step);
    SetStamp(**early.leased);
    early.computed = ComputeAndPush(step, **early.leased, &early.grad_norm);
  }
  return early;
}

absl::StatusOr<std::optional<Trainer::Next>> Trainer::JudgePull(
    Loop& loop, const absl::StatusOr<uint64_t>& pulled, bool last_pull) {
  // Without a previous step to redo, ABORTED means the job rolled back.
  if (absl::IsAborted(pulled.status()) && loop.prev_epoch == 0 &&
      AwaitRollback(*scheduler_, generation_)) {
    return Next::kAgain;
  }
  // (FAILED_PRECONDITION: the commit of step-1, collected with these
  // pulls, found this worker fenced; RedoInNewerView redoes only then.)
  if ((absl::IsAborted(pulled.status()) ||
       absl::IsFailedPrecondition(pulled.status())) &&
      loop.unanswered) {
    // The live workers changed before step-1 closed: it is redone with the
    // new view's shares.
    ps_->ForgetPushErrors();  // the pushes they came from: not applied
    if (!RedoInNewerView(*scheduler_, pulled.status(), loop.last)) {
      return pulled.status();
    }
    // Or the job rolled back: adopted at the top of the loop instead.
    if (scheduler_->view().generation() != generation_) return Next::kAgain;
    spdlog::info("strata worker: redoing step {}: {}", loop.step - 1,
                 pulled.status().ToString());
    if (metrics_) metrics_->redone.Add();
    loop.unanswered.reset();
    --loop.step;
    loop.prev_epoch = 0;
    return Next::kRedoPrevious;
  }
  STRATA_RETURN_IF_ERROR(pulled.status());
  // The previous step's commit applied (or every chunk closed it).
  if (loop.unanswered) {
    RecordStep(*std::exchange(loop.unanswered, std::nullopt), *loop.progress);
  }
  if (last_pull) return Next::kDone;
  if (bsp() && *pulled > static_cast<uint64_t>(loop.step) &&
      StillBsp(loop.step, absl::Seconds(1))) {
    // Every chunk closed this step without us (we were fenced or
    // rejoined): go on from where the job is. Our last pushes may not have
    // been applied: drop the errors they carried.
    loop.step = std::min<int64_t>(static_cast<int64_t>(*pulled),
                                  o_.steps + schedule_offset_);
    loop.prev_epoch = 0;
    ps_->ForgetPushErrors();
    return Next::kSkip;
  }
  return std::nullopt;
}

bool Trainer::BackToBsp(Loop& loop, const absl::Status& refused) {
  const std::optional<BspReturn> back =
      BackInBsp(*scheduler_, loop.step, refused);
  if (!back.has_value()) return false;
  spdlog::info(
      "strata worker: the job runs bsp from step {} (job step {}; was {} at "
      "clock {})",
      back->step, back->step - back->schedule_offset, mode_.ToString(),
      loop.step);
  mode_ = Consistency();
  schedule_offset_ = back->schedule_offset;
  loop.step = back->step;
  ps_->ForgetPushErrors();
  return true;
}

bool Trainer::MeasuresCpu() const {
  return gpt_->device() == "cpu" && !o_.waits_idle;
}

std::optional<double> Trainer::IdleSeconds(double wait_s, double step_s) const {
  if (!MeasuresCpu()) return wait_s;
  if (!step_cpu_.ok()) return std::nullopt;
  absl::StatusOr<CpuTime> now = ReadCpuTime(cpu_source_);
  if (!now.ok()) return std::nullopt;
  const std::optional<double> idle = IdleShare(*step_cpu_, *now);
  if (!idle.has_value()) return std::nullopt;
  return std::min(wait_s, *idle * step_s);
}

void Trainer::NoteStep(Loop& loop, const StepWork& work, double loss,
                       float grad_norm, absl::Time t0) {
  const StepView& sv = work.view;
  loop.last = sv;
  loop.prev_epoch = work.stamp_epoch;
  rank_ = sv.rank;
  workers_ = sv.workers;
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  const double rate = work.samples * o_.model.context / std::max(secs, 1e-9);
  loop.tokens_per_s =
      loop.tokens_per_s == 0 ? rate : 0.8 * loop.tokens_per_s + 0.2 * rate;
  // The ledger splits BSP steps by this: the speed of computing, not of
  // the whole step (which waits for the slowest worker).
  const double compute_rate = work.samples / std::max(compute_s_, 1e-9);
  speed_ = speed_ == 0 ? compute_rate : 0.7 * speed_ + 0.3 * compute_rate;
  // The wire's step (the switcher counts steps since a switch in these).
  scheduler_->SetProgress(loop.step + 1, speed_);
  scheduler_->SetWire(ps_->WirePaths());
  const double wait_s = absl::ToDoubleSeconds(pull_.waited);
  scheduler_->NoteStep(loop.step, static_cast<uint64_t>(work.samples),
                       compute_s_, wait_s, IdleSeconds(wait_s, secs));
  StepRecord r{.samples = work.samples,
               .compute_s = compute_s_,
               .sync_s = sync_s_,
               .expert_pulled = sparse_ ? pull_.expert_floats : expert_floats_,
               .expert_pushed = sparse_ ? expert_pushed_ : expert_floats_};
  StepMetrics& m = r.m;
  m.step = JobStep(loop.step);
  m.total_steps = o_.steps;
  m.loss = loss;
  m.tokens_per_s = loop.tokens_per_s;
  if (gpt_->peak_flops() > 0) {
    m.mfu = loop.tokens_per_s * gpt_->flops_per_token() / gpt_->peak_flops();
  }
  m.grad_norm = grad_norm;
  // Before EvalLoss, whose forward routes again.
  if (const MoeStats moe = gpt_->moe_stats(); moe.assignments > 0) {
    m.moe_aux_loss = moe.aux_loss;
    m.moe_dropped = static_cast<double>(moe.dropped) / moe.assignments;
    m.moe_load = moe.load;
  }
  OptimizerParams lr_params;
  lr_params.lr = o_.lr;
  lr_params.warmup_steps = o_.warmup_steps;
  lr_params.total_steps = o_.steps;
  lr_params.min_lr_ratio = o_.min_lr_ratio;
  m.lr = ScheduledLr(lr_params, std::max<int64_t>(0, JobStep(loop.step)));
  m.elapsed = absl::Now() - loop.start;
  if (auto_consistency_) m.consistency = mode_.ToString();
  if (sparse_) {
    m.moe_experts_pulled =
        static_cast<double>(pull_.expert_floats) / expert_floats_;
    m.moe_experts_pushed = static_cast<double>(expert_pushed_) / expert_floats_;
  }
  if (EvalDue(JobStep(loop.step))) {
    // Evaluate the weights this step was computed from.
    auto eval = EvalLoss();
    if (eval.ok()) m.eval_loss = *eval;
  }
  // Recorded once the next step's pulls answer for its commit: a step
  // redone in a newer view is counted and written once, when its second
  // computation commits.
  loop.unanswered = std::move(r);
  ++loop.step;
}

}  // namespace strata
