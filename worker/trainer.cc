#include "worker/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "cluster/worker_session.h"
#include "collective/grad_buckets.h"
#include "collective/kv_rendezvous.h"
#include "common/consistency.h"
#include "common/status.h"
#include "common/work_share.h"
#include "optim/optimizer.h"
#include "spdlog/spdlog.h"
#include "worker/data.h"
#include "worker/gpt_config_json.h"
#include "worker/grad_accumulator.h"
#include "worker/progress.h"
#include "worker/server_model.h"
#include "worker/trainer_loop.h"
#include "worker/worker_metrics.h"

namespace strata {
namespace {

void Append(std::vector<OpHandle>& ops, std::vector<OpHandle> more) {
  ops.insert(ops.end(), more.begin(), more.end());
}

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
  }

  absl::Status Run();

 private:
  // Pulls the weights for `step`; `prev_epoch` is the epoch step-1 was
  // computed in (0: unknown). Returns the smallest chunk version read.
  absl::StatusOr<uint64_t> PullWeights(int64_t step, uint64_t prev_epoch);
  // The step to start at: where the servers are (0 for a new job; later
  // for a worker that joins a running one or restarts).
  absl::StatusOr<int64_t> FirstStep();
  // Computes `work` of `step` and pushes the gradients stamped with
  // stamp_. Sets compute_s_ to the forward and backward time.
  absl::StatusOr<double> ComputeAndPush(int64_t step, const StepWork& work,
                                        float* grad_norm);
  absl::Status PushParam(int param, int64_t step, uint64_t samples,
                         std::vector<OpHandle>& ops);
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
  // Counts a finished step of `samples` in the metrics, if any.
  void RecordStep(int64_t step, int64_t samples, double loss,
                  double tokens_per_s);

  const TrainerOptions& o_;
  std::unique_ptr<Model> gpt_;
  std::unique_ptr<TokenDataset> data_;
  std::unique_ptr<SchedulerClient> scheduler_;
  std::unique_ptr<PsClient> ps_;
  Consistency mode_;
  int rank_;
  int workers_;
  StepStamp stamp_;          // of the step being computed
  uint64_t generation_ = 0;  // the rollback generation steps are computed in
  v1::LedgerJob job_;        // this job, as the data ledger knows it
  double speed_ = 0;         // samples/s computing, smoothed
  double compute_s_ = 0;
  double sync_s_ = 0;  // after backward, until the step is pushed
  std::unique_ptr<WorkerMetrics> metrics_;  // null: no metrics
  std::vector<int32_t> tokens_, targets_;
  GradAccumulator accumulator_;
  // All-reduce sync: the group and the (generation, workers epoch) it was
  // formed for.
  std::unique_ptr<Communicator> comm_;
  std::string comm_key_;
  std::unique_ptr<GradBuckets> buckets_;  // over comm_
};

absl::StatusOr<uint64_t> Trainer::JoinGroupForStep(const StepWork& work) {
  const std::string key = absl::StrCat(generation_, "-", work.stamp_epoch);
  if (comm_ == nullptr || comm_key_ != key || !comm_->health().ok()) {
    buckets_.reset();
    comm_.reset();
    GlooOptions options;
    options.rank = work.view.rank;
    options.size = work.view.workers;
    options.hostname = o_.collective_host;
    options.connect_timeout = o_.collective_timeout;
    options.comm.timeout = o_.collective_timeout;
    // A rank that died or a worker that joined since the split moves the
    // workers epoch on: this group will never be whole, stop waiting.
    const uint64_t epoch = work.stamp_epoch, generation = generation_;
    auto superseded = [this, epoch, generation] {
      const v1::View v = scheduler_->view();
      return v.workers_epoch() > epoch || v.generation() != generation;
    };
    // Named by the rollback generation, zero-padded so that older names
    // sort first (ForgetGroupsBefore).
    const std::string name = absl::StrFormat("dp-g%020d", generation_);
    absl::StatusOr<std::unique_ptr<Communicator>> comm = JoinGlooGroup(
        scheduler_.get(), name, work.stamp_epoch, options, superseded);
    if (!comm.ok()) {
      return absl::AbortedError(
          absl::StrCat("all-reduce group: ", comm.status().ToString()));
    }
    comm_ = *std::move(comm);
    comm_key_ = key;
    buckets_ = std::make_unique<GradBuckets>(comm_.get(), o_.bucket_bytes);
    spdlog::info(
        "strata worker: all-reduce group of {} formed (rank {}, generation "
        "{}, workers epoch {})",
        comm_->size(), comm_->rank(), generation_, work.stamp_epoch);
    if (comm_->rank() == 0) {
      // The groups before this one are over: their keys can go.
      absl::StatusOr<uint64_t> forgot =
          ForgetGroupsBefore(scheduler_.get(), "dp-g", name, work.stamp_epoch);
      if (!forgot.ok()) {
        spdlog::warn("strata worker: old all-reduce groups' keys stay: {}",
                     forgot.status().ToString());
      } else if (*forgot > 0) {
        spdlog::info("strata worker: deleted {} keys of earlier groups",
                     *forgot);
      }
    }
  }
  float total = static_cast<float>(work.samples);
  if (absl::Status s =
          comm_->AllReduce(absl::MakeSpan(&total, 1), ReduceOp::kSum);
      !s.ok()) {
    return absl::AbortedError(absl::StrCat("all-reduce: ", s.ToString()));
  }
  return static_cast<uint64_t>(total);
}

absl::Status Trainer::WaitReduced() {
  absl::Status first = buckets_->Wait();
  if (first.ok()) return first;
  return absl::AbortedError(absl::StrCat("all-reduce: ", first.ToString()));
}

absl::StatusOr<uint64_t> Trainer::PullWeights(int64_t step,
                                              uint64_t prev_epoch) {
  // First layers first: forward needs them first.
  const bool bsp = mode_.mode == Consistency::kBsp;
  const int n = static_cast<int>(gpt_->params().size());
  std::vector<OpHandle> ops;
  for (int i = 0; i < n; ++i) {
    Append(ops,
           ps_->PullTensorAsync(
               i, gpt_->param_data(i), step, bsp ? step : 0, /*priority=*/n - i,
               StepStamp{.epoch = prev_epoch, .generation = generation_}));
  }
  // Every pull finishes before this returns, failed or not: one still in
  // flight would write into param_data while a redone step computes.
  STRATA_RETURN_IF_ERROR(WaitAll(ops));
  uint64_t min_version = UINT64_MAX;
  for (const OpHandle& op : ops)
    min_version = std::min(min_version, op.version());
  return min_version;
}

absl::StatusOr<int64_t> Trainer::FirstStep() {
  // Read every chunk without waiting at the gate (clock -1). BSP: the open
  // step is the smallest chunk version (a step half-closed when we joined
  // is one we must push too). SSP/ASP: the slowest live worker's clock.
  const int n = static_cast<int>(gpt_->params().size());
  std::vector<OpHandle> ops;
  for (int i = 0; i < n; ++i) {
    Append(ops, ps_->PullTensorAsync(i, gpt_->param_data(i), -1, 0, 0,
                                     StepStamp{.generation = generation_}));
  }
  uint64_t min_version = UINT64_MAX;
  int64_t min_clock = INT64_MAX;
  for (auto& op : ops) {
    STRATA_RETURN_IF_ERROR(op.Wait());
    min_version = std::min(min_version, op.version());
    min_clock = std::min(min_clock, op.min_clock());
  }
  if (ops.empty()) return 0;
  return mode_.mode == Consistency::kBsp ? static_cast<int64_t>(min_version)
                                         : min_clock;
}

absl::Status Trainer::PushParam(int param, int64_t step, uint64_t samples,
                                std::vector<OpHandle>& ops) {
  // Last layers first: their gradients are ready first and the next step's
  // pulls want the first layers, so the two streams interleave.
  Append(ops, ps_->PushTensorAsync(param, gpt_->grad_data(param), step, samples,
                                   /*priority=*/param, stamp_));
  return absl::OkStatus();
}

absl::StatusOr<double> Trainer::ComputeAndPush(int64_t step,
                                               const StepWork& work,
                                               float* grad_norm) {
  const int T = o_.model.context;
  const int B = static_cast<int>(work.samples);
  tokens_.resize(static_cast<size_t>(B) * T);
  targets_.resize(static_cast<size_t>(B) * T);
  size_t row = 0;
  for (const v1::WorkUnit& u : work.units) {
    data_->Batch(Split::kTrain, o_.seed, u.first(), static_cast<int>(u.count()),
                 tokens_.data() + row * T, targets_.data() + row * T);
    row += static_cast<size_t>(u.count());
  }
  const absl::Time t0 = absl::Now();
  std::vector<OpHandle> ops;
  // All-reduce sync: every worker's gradient is weighted by its share of
  // the step's samples and summed among the workers as backward finishes
  // each; every worker then holds the step's gradient, clips it and pushes
  // its share of the chunks.
  const bool reduce = o_.sync == "allreduce";
  uint64_t total = static_cast<uint64_t>(B);
  if (reduce) {
    STRATA_ASSIGN_OR_RETURN(total, JoinGroupForStep(work));
  }
  const float share = static_cast<float>(static_cast<double>(B) / total);
  bool reducing = false;  // all-reduces started this step
  auto all_reduce = [&](int param) {
    float* g = gpt_->grad_data(param);
    const size_t numel = gpt_->params()[param].spec.numel();
    if (share != 1.0f) {
      for (size_t k = 0; k < numel; ++k) g[k] *= share;
    }
    buckets_->Add(g, numel);
    reducing = true;
  };
  // Clipping needs the whole gradient's norm. Overlapped, the servers hold
  // each pushed gradient until Commit brings the factor (the same float
  // multiply the worker would do, so the same update); else the worker
  // scales and pushes after backward.
  const bool clip = o_.grad_clip > 0;
  const bool stream = !reduce && (!clip || o_.overlap_clip);
  stamp_.deferred = !reduce && clip && o_.overlap_clip;
  stamp_.whole_step = reduce;
  stamp_.share_stride = reduce ? comm_->size() : 1;
  stamp_.share_index = reduce ? comm_->rank() : 0;
  ps_->ForgetDeferred();  // counts of an earlier attempt that failed
  // Micro-batches: all but the last are kept, weighted by their share of
  // the samples; the last one's gradients complete the step's as backward
  // finishes each, and go out from there.
  const std::vector<int> pieces = GradAccumulator::Split(B, o_.micro_batches);
  const int last = static_cast<int>(pieces.size()) - 1;
  const float last_weight = static_cast<float>(pieces[last]) / B;
  auto finish = [&](int param) {
    if (last > 0) accumulator_.Finish(*gpt_, param, last_weight);
  };
  double loss_sum = 0;
  absl::Status failed;
  int first_row = 0;
  for (int k = 0; k <= last && failed.ok(); ++k) {
    if (k == last && stream) {
      // Push each gradient as soon as backward has finished it.
      gpt_->SetGradReadyCallback([&](int param) {
        finish(param);
        (void)PushParam(param, step, B, ops);
      });
    } else if (k == last && reduce) {
      // Reduce each gradient as soon as backward has finished it.
      gpt_->SetGradReadyCallback([&](int param) {
        finish(param);
        all_reduce(param);
      });
    }
    absl::StatusOr<float> piece_loss = gpt_->ForwardBackward(
        tokens_.data() + static_cast<size_t>(first_row) * T,
        targets_.data() + static_cast<size_t>(first_row) * T, pieces[k], T);
    gpt_->SetGradReadyCallback(nullptr);  // it captures this frame's locals
    if (!piece_loss.ok()) {
      failed = piece_loss.status();
      break;
    }
    const float weight = static_cast<float>(pieces[k]) / B;
    loss_sum += static_cast<double>(weight) * *piece_loss;
    if (k < last) accumulator_.Add(*gpt_, weight, /*first=*/k == 0);
    first_row += pieces[k];
  }
  const absl::Time computed = absl::Now();
  compute_s_ = absl::ToDoubleSeconds(computed - t0);
  if (!failed.ok()) {
    (void)WaitAll(ops);  // pushes in flight read grad_data
    if (reducing) {
      comm_->Abort();  // the others would wait for this worker's share
      (void)WaitReduced();
    }
    return failed;
  }
  if (!stream && !reduce) {
    for (int i = 0; i < static_cast<int>(gpt_->params().size()); ++i) finish(i);
  }
  if (reduce) {
    buckets_->Flush();
    STRATA_RETURN_IF_ERROR(WaitReduced());
  }
  const double loss = loss_sum;
  const int n = static_cast<int>(gpt_->params().size());
  double sq = 0;
  for (int i = 0; i < n; ++i) {
    sq += SumOfSquares(gpt_->grad_data(i),
                       static_cast<int64_t>(gpt_->params()[i].spec.numel()));
  }
  const double norm = std::sqrt(sq);
  *grad_norm = static_cast<float>(norm);
  // In double: a norm past float's range still gives a positive factor.
  const float scale = clip && norm > o_.grad_clip
                          ? static_cast<float>(o_.grad_clip / norm)
                          : 1.0f;
  if (!stream) {
    for (int i = n - 1; i >= 0; --i) {
      if (scale != 1.0f) {
        float* g = gpt_->grad_data(i);
        const int64_t numel =
            static_cast<int64_t>(gpt_->params()[i].spec.numel());
        for (int64_t k = 0; k < numel; ++k) g[k] *= scale;
      }
      STRATA_RETURN_IF_ERROR(PushParam(i, step, reduce ? total : B, ops));
    }
  }
  STRATA_RETURN_IF_ERROR(WaitAll(ops));
  if (stamp_.deferred) STRATA_RETURN_IF_ERROR(ps_->Commit(step, scale));
  sync_s_ = absl::ToDoubleSeconds(absl::Now() - computed);
  return loss;
}

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
  if (o_.sync == "allreduce" && !bsp) {
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
  for (;;) {
    if (o_.stop != nullptr && o_.stop->load()) {
      progress->Finish();
      spdlog::info("strata worker: left the job before step {}", step);
      return absl::OkStatus();
    }
    if (std::optional<int64_t> back =
            AdoptRollback(*scheduler_, &generation_)) {
      step = *back;
      prev_epoch = 0;
      // A restarted server that held no snapshot lacks the chunks.
      STRATA_RETURN_IF_ERROR(ps_->RegisterModel(ServerModel(*gpt_, o_)));
      continue;
    }
    const absl::Time t0 = absl::Now();
    // BSP: the weights at version `step` (step-1 closed). After the last
    // step, the final weights; SSP/ASP read those without the gate.
    const bool last_pull = bsp ? step == o_.steps : finished;
    const int64_t clock = last_pull && !bsp ? -1 : step;
    absl::StatusOr<uint64_t> pulled = PullWeights(clock, prev_epoch);
    if (metrics_) {
      metrics_->pull_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
    }
    // Without a previous step to redo, ABORTED means the job rolled back.
    if (absl::IsAborted(pulled.status()) && prev_epoch == 0 &&
        AwaitRollback(*scheduler_, generation_)) {
      continue;
    }
    if (absl::IsAborted(pulled.status()) && step > first_step) {
      // The live workers changed before step-1 closed: it is redone with
      // the new view's shares.
      spdlog::info("strata worker: redoing step {}: {}", step - 1,
                   pulled.status().ToString());
      if (metrics_) metrics_->redone.Add();
      if (!RedoInNewerView(*scheduler_, pulled.status(), last)) {
        return pulled.status();
      }
      --step;
      prev_epoch = 0;
      continue;
    }
    STRATA_RETURN_IF_ERROR(pulled.status());
    if (last_pull) break;
    if (bsp && *pulled > static_cast<uint64_t>(step)) {
      // Every chunk closed this step without us (we were fenced or
      // rejoined): go on from where the job is.
      step = std::min<int64_t>(static_cast<int64_t>(*pulled), o_.steps);
      prev_epoch = 0;
      continue;
    }
    absl::StatusOr<StepWork> work = LeaseStepWork(*scheduler_, step, job_);
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
    stamp_ =
        StepStamp{.epoch = work->stamp_epoch,
                  .first_sample = static_cast<uint64_t>(work->units[0].first()),
                  .generation = generation_};
    float grad_norm = 0;
    absl::StatusOr<double> loss_or = ComputeAndPush(step, *work, &grad_norm);
    if (!loss_or.ok() && RedoInNewerView(*scheduler_, loss_or.status(), sv)) {
      spdlog::info("strata worker: redoing step {}: {}", step,
                   loss_or.status().ToString());
      if (metrics_) metrics_->redone.Add();
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(const double loss, loss_or);
    last = sv;
    prev_epoch = work->stamp_epoch;
    rank_ = sv.rank;
    workers_ = sv.workers;
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    const double rate = work->samples * o_.model.context / std::max(secs, 1e-9);
    tokens_per_s = step == 0 ? rate : 0.8 * tokens_per_s + 0.2 * rate;
    // The ledger splits BSP steps by this: the speed of computing, not of
    // the whole step (which waits for the slowest worker).
    const double compute_rate = work->samples / std::max(compute_s_, 1e-9);
    speed_ = speed_ == 0 ? compute_rate : 0.7 * speed_ + 0.3 * compute_rate;
    scheduler_->SetProgress(step + 1, speed_);
    RecordStep(step, work->samples, loss, tokens_per_s);
    StepMetrics m;
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
    progress->Step(m);
    ++step;
  }
  progress->Finish();
  return WriteOutputs();
}

void Trainer::RecordStep(int64_t step, int64_t samples, double loss,
                         double tokens_per_s) {
  if (!metrics_) return;
  metrics_->steps.Add();
  metrics_->samples.Add(static_cast<double>(samples));
  metrics_->tokens.Add(static_cast<double>(samples) * o_.model.context);
  metrics_->step.Set(static_cast<double>(step + 1));
  metrics_->loss.Set(loss);
  metrics_->tokens_per_s.Set(tokens_per_s);
  metrics_->compute_seconds.Observe(compute_s_);
  metrics_->sync_seconds.Observe(sync_s_);
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
  if (!o_.model_json_path.empty()) {
    std::ofstream f(o_.model_json_path, std::ios::trunc);
    f << GptConfigToJson(o_.model) << "\n";
    if (!f)
      return absl::InternalError(
          absl::StrCat("cannot write ", o_.model_json_path));
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

}  // namespace

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
