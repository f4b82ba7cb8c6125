#include "worker/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "optim/optimizer.h"
#include "spdlog/spdlog.h"
#include "worker/gpt_config_json.h"
#include "worker/progress.h"
#include "worker/trainer_impl.h"
#include "worker/trainer_loop.h"

namespace strata {

absl::StatusOr<double> Trainer::EvalLoss() {
  if (data_->num_windows(Split::kEval) == 0)
    return absl::FailedPreconditionError("no eval split");
  const int T = o_.model.context;
  const int B = static_cast<int>(std::min<int64_t>(o_.batch, 8));
  tokens_.resize(static_cast<size_t>(B) * T);
  targets_.resize(static_cast<size_t>(B) * T);
  double sum = 0;
  for (int b = 0; b < o_.eval_batches; ++b) {
    data_->Batch(Split::kEval, o_.seed, static_cast<int64_t>(b) * B, B,
                 tokens_.data(), targets_.data());
    STRATA_ASSIGN_OR_RETURN(float loss,
                            gpt_->Loss(tokens_.data(), targets_.data(), B, T));
    sum += loss;
  }
  return sum / o_.eval_batches;
}

absl::Status Trainer::Run() {
  STRATA_ASSIGN_OR_RETURN(
      auto progress,
      Progress::Create(rank_ == 0 ? stderr : nullptr, isatty(STDERR_FILENO),
                       o_.log_every, o_.metrics_path));
  if (rank_ == 0) {
    spdlog::info(
        "strata worker: GPT {} layers, {} heads, width {}, context {}, vocab "
        "{}: {} parameters, {:.3g} FLOPs/token, on {}; {} worker(s), global "
        "batch {}, {}",
        o_.model.layers, o_.model.heads, o_.model.width, o_.model.context,
        o_.model.vocab, gpt_->num_params(), gpt_->flops_per_token(),
        gpt_->device(), workers_, o_.batch, mode_.ToString());
  }
  job_ = LedgerJobFor(ps_->plan(), o_.steps, o_.batch,
                      data_->num_windows(Split::kTrain), o_.seed);
  const absl::Time start = absl::Now();
  double tokens_per_s = 0;
  generation_ = scheduler_->view().generation();
  absl::StatusOr<int64_t> first = FirstStep();
  // Joined while the job rolled back: read the weights of the new
  // generation.
  while (absl::IsAborted(first.status()) &&
         AwaitRollback(*scheduler_, generation_)) {
    generation_ = scheduler_->view().generation();
    first = FirstStep();
  }
  STRATA_ASSIGN_OR_RETURN(const int64_t first_step, first);
  if (first_step >= o_.steps) {
    return absl::FailedPreconditionError(
        absl::StrCat("the servers are already at step ", first_step, " of ",
                     o_.steps, ": nothing to train"));
  }
  if (first_step > 0) {
    spdlog::info("strata worker: joining at step {}", first_step);
  }
  const bool bsp = mode_.mode == Consistency::kBsp;
  if (o_.sync == SyncMode::kAllReduce && !bsp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync allreduce needs BSP servers; these run ", mode_.ToString()));
  }
  StepView last;            // the view the previous step was computed in
  uint64_t prev_epoch = 0;  // its stamp epoch; 0: unknown (no redo check)
  int64_t step = first_step;
  // SSP/ASP: the job ends when the ledger has seen every sample applied,
  // which may take this worker past --steps clocks (it took over the units
  // of a worker that died).
  bool finished = false;
  // The last step computed, until the next step's pulls answer for its
  // commit: a step redone in a newer view is counted and written once,
  // when its second computation commits. Set exactly when there is a
  // previous step this loop could redo.
  std::optional<StepRecord> unanswered;
  for (;;) {
    if (o_.stop != nullptr && o_.stop->load()) {
      // Leaving between steps. Under SSP and ASP the last step's pushes
      // were answered before it ended. Under BSP it is not counted: its
      // step closes only if every other worker pushed before this one
      // leaves (a change of workers drops the open step's pushes), which
      // only a pull could tell.
      if (unanswered && !bsp) RecordStep(*unanswered, *progress);
      progress->Finish();
      spdlog::info("strata worker: left the job before step {}", step);
      return absl::OkStatus();
    }
    if (std::optional<int64_t> back =
            AdoptRollback(*scheduler_, &generation_)) {
      // The rollback step's snapshot holds every step before it, closed.
      if (unanswered && unanswered->m.step < *back) {
        RecordStep(*unanswered, *progress);
      }
      unanswered.reset();
      // The last commit belongs to the old generation: collected here, not
      // by the new generation's first pulls.
      if (commit_.valid()) (void)commit_.get();
      step = *back;
      prev_epoch = 0;
      ps_->ForgetPushErrors();
      // A restarted server that held no snapshot lacks the chunks.
      STRATA_RETURN_IF_ERROR(ps_->RegisterModelAgain());
      continue;
    }
    const absl::Time t0 = absl::Now();
    // BSP: the weights at version `step` (step-1 closed). After the last
    // step, the final weights; SSP/ASP read those without the gate.
    const bool last_pull = bsp ? step == o_.steps : finished;
    const int64_t clock = last_pull && !bsp ? -1 : step;
    StartPull(clock, prev_epoch, /*final=*/last_pull);
    // Forward over the pulls: the step's samples are leased while they are
    // in flight and forward waits for each layer's weights
    // (ComputeAndPush; nothing is pushed unless the pulls let the step go
    // on). Not under all-reduce sync, where a worker joins the step's
    // group only once its pulls have said the step is its to compute.
    std::optional<absl::StatusOr<StepWork>> leased;
    std::optional<absl::StatusOr<double>> computed;
    float grad_norm = 0;
    if (!last_pull && o_.forward_during_pull && o_.sync == SyncMode::kPs) {
      leased = LeaseStepWork(*scheduler_, step, job_);
      if (leased->ok() && (*leased)->view.generation == generation_) {
        SetStamp(**leased);
        computed = ComputeAndPush(step, **leased, &grad_norm);
      }
    }
    absl::StatusOr<uint64_t> pulled = FinishPull();
    if (metrics_) {
      metrics_->pull_seconds.Observe(absl::ToDoubleSeconds(pull_.waited));
    }
    // Without a previous step to redo, ABORTED means the job rolled back.
    if (absl::IsAborted(pulled.status()) && prev_epoch == 0 &&
        AwaitRollback(*scheduler_, generation_)) {
      continue;
    }
    // (FAILED_PRECONDITION: the commit of step-1, collected with these
    // pulls, found this worker fenced; RedoInNewerView redoes only then.)
    if ((absl::IsAborted(pulled.status()) ||
         absl::IsFailedPrecondition(pulled.status())) &&
        unanswered) {
      // The live workers changed before step-1 closed: it is redone with
      // the new view's shares.
      ps_->ForgetPushErrors();  // the pushes they came from: not applied
      if (!RedoInNewerView(*scheduler_, pulled.status(), last)) {
        return pulled.status();
      }
      // Or the job rolled back: adopted at the top of the loop instead.
      if (scheduler_->view().generation() != generation_) continue;
      spdlog::info("strata worker: redoing step {}: {}", step - 1,
                   pulled.status().ToString());
      if (metrics_) metrics_->redone.Add();
      unanswered.reset();
      --step;
      prev_epoch = 0;
      continue;
    }
    STRATA_RETURN_IF_ERROR(pulled.status());
    // The previous step's commit applied (or every chunk closed it).
    if (unanswered)
      RecordStep(*std::exchange(unanswered, std::nullopt), *progress);
    if (last_pull) break;
    if (bsp && *pulled > static_cast<uint64_t>(step)) {
      // Every chunk closed this step without us (we were fenced or
      // rejoined): go on from where the job is. Our last pushes may not
      // have been applied: drop the errors they carried.
      step = std::min<int64_t>(static_cast<int64_t>(*pulled), o_.steps);
      prev_epoch = 0;
      ps_->ForgetPushErrors();
      continue;
    }
    absl::StatusOr<StepWork> work =
        leased.has_value() ? *std::move(leased)
                           : LeaseStepWork(*scheduler_, step, job_);
    if (absl::IsOutOfRange(work.status())) {
      // BSP: the job applied this step without us (we were fenced or
      // joined late): go on from the next one. SSP/ASP: every sample is
      // applied: read the final weights.
      if (bsp) ++step;
      finished = !bsp;
      prev_epoch = 0;
      continue;
    }
    STRATA_RETURN_IF_ERROR(work.status());
    const StepView& sv = work->view;
    if (sv.generation != generation_) continue;  // adopt the rollback first
    if (!computed.has_value() || pull_.broke_pass) {
      // Not overlapped, or a wait broke the pass and the pulls' second try
      // (after the gate's deadline ran out during the commit) succeeded.
      SetStamp(*work);
      computed = ComputeAndPush(step, *work, &grad_norm);
    }
    absl::StatusOr<double> loss_or = *std::move(computed);
    if (!loss_or.ok() && RedoInNewerView(*scheduler_, loss_or.status(), sv)) {
      spdlog::info("strata worker: redoing step {}: {}", step,
                   loss_or.status().ToString());
      if (metrics_) metrics_->redone.Add();
      ps_->ForgetPushErrors();  // the pushes they came from: not applied
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(const double loss, loss_or);
    last = sv;
    prev_epoch = work->stamp_epoch;
    rank_ = sv.rank;
    workers_ = sv.workers;
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    const double rate = work->samples * o_.model.context / std::max(secs, 1e-9);
    tokens_per_s = tokens_per_s == 0 ? rate : 0.8 * tokens_per_s + 0.2 * rate;
    // The ledger splits BSP steps by this: the speed of computing, not of
    // the whole step (which waits for the slowest worker).
    const double compute_rate = work->samples / std::max(compute_s_, 1e-9);
    speed_ = speed_ == 0 ? compute_rate : 0.7 * speed_ + 0.3 * compute_rate;
    scheduler_->SetProgress(step + 1, speed_);
    StepRecord r{
        .samples = work->samples, .compute_s = compute_s_, .sync_s = sync_s_};
    StepMetrics& m = r.m;
    m.step = step;
    m.total_steps = o_.steps;
    m.loss = loss;
    m.tokens_per_s = tokens_per_s;
    if (gpt_->peak_flops() > 0) {
      m.mfu = tokens_per_s * gpt_->flops_per_token() / gpt_->peak_flops();
    }
    m.grad_norm = grad_norm;
    OptimizerParams lr_params;
    lr_params.lr = o_.lr;
    lr_params.warmup_steps = o_.warmup_steps;
    lr_params.total_steps = o_.steps;
    lr_params.min_lr_ratio = o_.min_lr_ratio;
    m.lr = ScheduledLr(lr_params, step);
    m.elapsed = absl::Now() - start;
    if (rank_ == 0 && o_.eval_every > 0 &&
        ((step + 1) % o_.eval_every == 0 || step + 1 == o_.steps)) {
      // Evaluate the weights this step was computed from.
      auto eval = EvalLoss();
      if (eval.ok()) m.eval_loss = *eval;
    }
    unanswered = std::move(r);
    ++step;
  }
  progress->Finish();
  return WriteOutputs();
}

void Trainer::RecordStep(const StepRecord& r, Progress& progress) {
  progress.Step(r.m);
  if (!metrics_) return;
  metrics_->steps.Add();
  metrics_->samples.Add(static_cast<double>(r.samples));
  metrics_->tokens.Add(static_cast<double>(r.samples) * o_.model.context);
  metrics_->step.Set(static_cast<double>(r.m.step + 1));
  metrics_->loss.Set(r.m.loss);
  metrics_->tokens_per_s.Set(r.m.tokens_per_s);
  metrics_->compute_seconds.Observe(r.compute_s);
  metrics_->sync_seconds.Observe(r.sync_s);
}

absl::Status Trainer::WriteOutputs() {
  // The final weights are in param_data (Run pulled them).
  if (rank_ != 0) return absl::OkStatus();
  if (o_.snapshot_at_end) {
    // Servers without a data dir cannot snapshot; the training itself
    // succeeded, so say so loudly and go on.
    if (absl::Status s = ps_->SnapshotAll(o_.steps); !s.ok()) {
      spdlog::warn("strata worker: no snapshot of the final weights: {}",
                   s.ToString());
    }
  }
  if (!o_.weights_out.empty()) {
    std::ofstream f(o_.weights_out, std::ios::binary | std::ios::trunc);
    for (size_t i = 0; i < gpt_->params().size(); ++i) {
      f.write(
          reinterpret_cast<const char*>(gpt_->param_data(static_cast<int>(i))),
          static_cast<std::streamsize>(gpt_->params()[i].spec.numel() * 4));
    }
    if (!f)
      return absl::InternalError(absl::StrCat("cannot write ", o_.weights_out));
  }
  return absl::OkStatus();
}

absl::Status RunTrainerLoop(const TrainerOptions& o, std::unique_ptr<Model> gpt,
                            std::unique_ptr<TokenDataset> data,
                            WorkerSession session,
                            std::unique_ptr<PsClient> ps) {
  Trainer trainer(o, std::move(gpt), std::move(data),
                  std::move(session.scheduler), std::move(ps),
                  session.consistency, session.rank, session.workers);
  return trainer.Run();
}

}  // namespace strata
