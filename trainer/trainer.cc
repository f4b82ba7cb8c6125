#include "trainer/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/gpt_config_json.h"
#include "optim/optimizer.h"
#include "spdlog/spdlog.h"
#include "trainer/progress.h"
#include "trainer/trainer_impl.h"
#include "trainer/trainer_loop.h"

namespace strata {

absl::StatusOr<double> Trainer::EvalLoss() {
  if (data_->num_windows(Split::kEval) == 0)
    return absl::FailedPreconditionError("no eval split");
  const int T = o_.model.context;
  const int B = static_cast<int>(std::min<int64_t>(o_.batch, 8));
  tokens_.resize(static_cast<size_t>(B) * T);
  targets_.resize(static_cast<size_t>(B) * T);
  if (sparse_) {
    // The step pulls every expert ahead when rank 0 is to evaluate it
    // (PullsAllExperts); a worker that became rank 0 since pulls what its
    // eval routes to now, at the step's clock (BSP: one may be at the
    // next version already, if every worker's push closed it meanwhile).
    gpt_->SetParamsWantedCallback(
        [this](absl::Span<const int> params) { WantParams(params); });
    gpt_->SetParamWaitCallback([this](int param) { return AwaitParam(param); });
  }
  double sum = 0;
  absl::Status failed;
  for (int b = 0; b < o_.eval_batches && failed.ok(); ++b) {
    data_->Batch(Split::kEval, o_.seed, static_cast<int64_t>(b) * B, B,
                 tokens_.data(), targets_.data());
    absl::StatusOr<float> loss =
        gpt_->Loss(tokens_.data(), targets_.data(), B, T);
    failed = loss.status();
    if (loss.ok()) sum += *loss;
  }
  gpt_->SetParamsWantedCallback(nullptr);
  gpt_->SetParamWaitCallback(nullptr);
  STRATA_RETURN_IF_ERROR(failed);
  return sum / o_.eval_batches;
}

// The worker's step loop: each turn leaves, adopts a rollback, or runs
// one step (Step), whose outcome says where the loop goes on from.
absl::Status Trainer::Run() {
  STRATA_ASSIGN_OR_RETURN(
      auto progress,
      Progress::Create(rank_ == 0 ? stderr : nullptr, isatty(STDERR_FILENO),
                       o_.log_every, o_.metrics_path));
  LogStart();
  job_ = LedgerJobFor(ps_->plan(), o_.steps, o_.batch,
                      data_->num_windows(Split::kTrain), o_.seed);
  Loop loop;
  loop.start = absl::Now();
  loop.progress = progress.get();
  STRATA_ASSIGN_OR_RETURN(loop.step, Join());
  for (;;) {
    if (o_.stop != nullptr && o_.stop->load()) return Leave(loop);
    STRATA_ASSIGN_OR_RETURN(const bool rolled_back, TakeRollback(loop));
    if (rolled_back) continue;
    STRATA_ASSIGN_OR_RETURN(const Next next, Step(loop));
    if (next == Next::kDone) break;
  }
  progress->Finish();
  return WriteOutputs();
}

void Trainer::LogStart() const {
  if (o_.slowdown != 1 || o_.jitter != 0) {
    spdlog::info(
        "strata worker: simulating a straggler: steps compute {}x as long, "
        "jitter {}, steps [{}, {})",
        o_.slowdown, o_.jitter, o_.slowdown_from,
        o_.slowdown_until < 0 ? std::string("end")
                              : std::to_string(o_.slowdown_until));
  }
  if (rank_ != 0) return;
  spdlog::info(
      "strata worker: GPT {} layers, {} heads, width {}, context {}, vocab "
      "{}: {} parameters, {:.3g} FLOPs/token, on {}; {} worker(s), global "
      "batch {}, {}",
      o_.model.layers, o_.model.heads, o_.model.width, o_.model.context,
      o_.model.vocab, gpt_->num_params(), gpt_->flops_per_token(),
      gpt_->device(), workers_, o_.batch, mode_.ToString());
}

absl::StatusOr<int64_t> Trainer::Join() {
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
  schedule_offset_ = scheduler_->view().schedule_offset();
  if (JobStep(first_step) >= o_.steps) {
    return absl::FailedPreconditionError(
        absl::StrCat("the servers are already at step ", first_step, " of ",
                     o_.steps, ": nothing to train"));
  }
  if (first_step > 0) {
    spdlog::info("strata worker: joining at step {}", first_step);
  }
  auto_consistency_ = !scheduler_->view().consistency_auto().empty();
  if (o_.sync == SyncMode::kAllReduce && auto_consistency_) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sync allreduce needs BSP servers; this job runs ",
                     scheduler_->view().consistency_auto(),
                     ", which may switch from BSP while it runs"));
  }
  if (o_.sync == SyncMode::kAllReduce && !bsp()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync allreduce needs BSP servers; these run ", mode_.ToString()));
  }
  return first_step;
}

absl::Status Trainer::Leave(Loop& loop) {
  // Leaving between steps. Under SSP and ASP the last step's pushes were
  // answered before it ended. Under BSP it is not counted: its step closes
  // only if every other worker pushed before this one leaves (a change of
  // workers drops the open step's pushes), which only a pull could tell.
  if (loop.unanswered && !bsp()) RecordStep(*loop.unanswered, *loop.progress);
  loop.progress->Finish();
  spdlog::info("strata worker: left the job before step {}", loop.step);
  return absl::OkStatus();
}

absl::StatusOr<bool> Trainer::TakeRollback(Loop& loop) {
  std::optional<int64_t> back = AdoptRollback(*scheduler_, &generation_);
  if (!back.has_value()) return false;
  // The rollback step's snapshot holds every step before it, closed.
  if (loop.unanswered && loop.unanswered->m.step < *back) {
    RecordStep(*loop.unanswered, *loop.progress);
  }
  loop.unanswered.reset();
  // The last commit belongs to the old generation: collected here, not by
  // the new generation's first pulls.
  if (commit_.valid()) (void)commit_.get();
  loop.step = *back;
  loop.prev_epoch = 0;
  ps_->ForgetPushErrors();
  // A restarted server that held no snapshot lacks the chunks.
  STRATA_RETURN_IF_ERROR(ps_->RegisterModelAgain());
  return true;
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
  if (expert_metrics_ == nullptr) return;
  ExpertMetrics& em = *expert_metrics_;
  em.pulled_bytes.Add(4.0 * static_cast<double>(r.expert_pulled));
  em.pushed_bytes.Add(4.0 * static_cast<double>(r.expert_pushed));
  em.dense_bytes.Add(4.0 * static_cast<double>(expert_floats_));
  for (size_t l = 0; l < em.load.size() && l < r.m.moe_load.size(); ++l) {
    for (size_t e = 0; e < em.load[l].size() && e < r.m.moe_load[l].size();
         ++e) {
      em.load[l][e]->Set(r.m.moe_load[l][e]);
    }
  }
}

absl::Status Trainer::WriteOutputs() {
  // The final weights are in param_data (Run pulled them).
  if (rank_ != 0) return absl::OkStatus();
  if (o_.snapshot_at_end) {
    // Servers without a data dir cannot snapshot; the training itself
    // succeeded, so say so loudly and go on.
    // Labelled by the last step on the wire, as the servers' own BSP
    // snapshots are (their versions): after a switch back to BSP those run
    // past --steps, and the final one must be the newest.
    if (absl::Status s = ps_->SnapshotAll(o_.steps + schedule_offset_);
        !s.ok()) {
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
