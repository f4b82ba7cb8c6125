// Trainer::ComputeAndPush: one step's forward and backward over its
// micro-batches, its gradients pushed (each as backward finishes it, or
// after clipping) or all-reduced first, and its commit. In phases:
// PlanPass → ForwardBackward → (Abandon on failure) → FinishGradients →
// PushAndCommit.
#include <cmath>
#include <future>
#include <optional>
#include <vector>

#include "common/status.h"
#include "common/sum_of_squares.h"
#include "trainer/trainer_impl.h"

namespace strata {

absl::StatusOr<double> Trainer::ComputeAndPush(int64_t step,
                                               const StepWork& work,
                                               float* grad_norm) {
  LoadBatch(work);
  const absl::Time t0 = absl::Now();
  STRATA_ASSIGN_OR_RETURN(Pass p, PlanPass(step, work));
  const absl::Duration waited_before = pull_.waited_in_pass;
  absl::StatusOr<double> loss = ForwardBackward(p);
  if (loss.ok()) {
    SimulateSlowdown(step,
                     absl::Now() - t0 - (pull_.waited_in_pass - waited_before));
  }
  const absl::Time computed = absl::Now();
  // Without the pass's waits for the pulls (the ledger splits steps by
  // this). Not FinishPull's wait in the first grad-ready call: a GPU's
  // backward goes on meanwhile.
  compute_s_ = absl::ToDoubleSeconds(computed - t0 -
                                     (pull_.waited_in_pass - waited_before));
  if (loss.ok() && !MayPush(p)) {
    loss = absl::AbortedError("this step's pulls did not let it go on");
  }
  if (!loss.ok()) {
    Abandon(p);
    return loss.status();
  }
  STRATA_ASSIGN_OR_RETURN(const float scale, FinishGradients(p, grad_norm));
  STRATA_RETURN_IF_ERROR(PushAndCommit(p, scale));
  sync_s_ = absl::ToDoubleSeconds(absl::Now() - computed);
  expert_pushed_ = p.expert_floats_pushed;
  return *loss;
}

void Trainer::SimulateSlowdown(int64_t step, absl::Duration computed) {
  // --slowdown_steps counts job steps (JobStep), as --steps does.
  const int64_t at = JobStep(step);
  const bool on = at >= o_.slowdown_from &&
                  (o_.slowdown_until < 0 || at < o_.slowdown_until);
  if (!on || (o_.slowdown == 1 && o_.jitter == 0)) return;
  std::uniform_real_distribution<double> u(1 - o_.jitter, 1 + o_.jitter);
  const double factor = std::max(1.0, o_.slowdown * u(slowdown_rng_));
  absl::SleepFor(computed * (factor - 1));
}

void Trainer::LoadBatch(const StepWork& work) {
  const int T = o_.model.context;
  const size_t B = static_cast<size_t>(work.samples);
  tokens_.resize(B * T);
  targets_.resize(B * T);
  size_t row = 0;
  for (const v1::WorkUnit& u : work.units) {
    data_->Batch(Split::kTrain, o_.seed, u.first(), static_cast<int>(u.count()),
                 tokens_.data() + row * T, targets_.data() + row * T);
    row += static_cast<size_t>(u.count());
  }
}

absl::StatusOr<Trainer::Pass> Trainer::PlanPass(int64_t step,
                                                const StepWork& work) {
  Pass p;
  p.step = step;
  p.B = static_cast<int>(work.samples);
  p.total = static_cast<uint64_t>(p.B);
  // All-reduce sync: every worker's gradient is weighted by its share of
  // the step's samples and summed among the workers as backward finishes
  // each; every worker then holds the step's gradient, clips it and pushes
  // its share of the chunks.
  p.reduce = o_.sync == SyncMode::kAllReduce;
  if (p.reduce) {
    STRATA_ASSIGN_OR_RETURN(p.total, JoinGroupForStep(work));
  }
  p.share = static_cast<float>(static_cast<double>(p.B) / p.total);
  // Clipping needs the whole gradient's norm. Overlapped, the servers hold
  // each pushed gradient until Commit brings the factor (the same float
  // multiply the worker would do, so the same update); else the worker
  // scales and pushes after backward.
  p.clip = o_.grad_clip > 0;
  p.stream = !p.reduce && (!p.clip || o_.overlap_clip);
  stamp_.deferred = !p.reduce && p.clip && o_.overlap_clip;
  stamp_.whole_step = p.reduce;
  stamp_.share_stride = p.reduce ? comm_->size() : 1;
  stamp_.share_index = p.reduce ? comm_->rank() : 0;
  // Counts of an earlier attempt that failed (step-1's commit may be in
  // flight: its counts stay).
  ps_->ForgetDeferred(step);
  // Micro-batches: all but the last are kept, weighted by their share of
  // the samples; the last one's gradients complete the step's as backward
  // finishes each, and go out from there.
  p.pieces = GradAccumulator::Split(p.B, o_.micro_batches);
  p.square_sums.resize(gpt_->params().size());
  if (sparse_) p.used.assign(gpt_->params().size(), 0);
  return p;
}

absl::StatusOr<double> Trainer::ForwardBackward(Pass& p) {
  const int T = o_.model.context;
  const int last = static_cast<int>(p.pieces.size()) - 1;
  double loss_sum = 0;
  int first_row = 0;
  for (int k = 0; k <= last; ++k) {
    // Forward may start while this step's pulls are in flight (Run): the
    // first pass waits for each layer's weights before it reads them, and
    // no gradient goes out before every pull has landed and said this step
    // is this worker's to push (all of that before backward's first
    // gradient, since forward reads every parameter).
    // With sparse experts, every pass: its routers may want experts that
    // were not pulled ahead, which are pulled then.
    if (sparse_ || (k == 0 && !pull_.finished)) {
      gpt_->SetParamWaitCallback(
          [this](int param) { return AwaitParam(param); });
    }
    if (sparse_) {
      gpt_->SetParamsWantedCallback(
          [this](absl::Span<const int> params) { WantParams(params); });
    }
    if (k == last && p.stream) {
      gpt_->SetGradReadyCallback([&](int param) { StreamGrad(p, param); });
    } else if (k == last && p.reduce) {
      // Reduce each gradient as soon as backward has finished it.
      gpt_->SetGradReadyCallback([&](int param) {
        FinishParam(p, param);
        ReduceParam(p, param);
      });
    }
    absl::StatusOr<float> piece_loss = gpt_->ForwardBackward(
        tokens_.data() + static_cast<size_t>(first_row) * T,
        targets_.data() + static_cast<size_t>(first_row) * T, p.pieces[k], T);
    gpt_->SetGradReadyCallback(nullptr);  // it captures this frame's locals
    gpt_->SetParamWaitCallback(nullptr);
    gpt_->SetParamsWantedCallback(nullptr);
    STRATA_RETURN_IF_ERROR(piece_loss.status());
    if (sparse_) NoteUsed(p);
    const float weight = static_cast<float>(p.pieces[k]) / p.B;
    loss_sum += static_cast<double>(weight) * *piece_loss;
    if (k < last) accumulator_.Add(*gpt_, weight, /*first=*/k == 0);
    first_row += p.pieces[k];
  }
  if (sparse_) used_last_ = p.used;  // what the next step pulls ahead
  return loss_sum;
}

void Trainer::StreamGrad(Pass& p, int param) {
  // Push each gradient as soon as backward has finished it, and take its
  // share of the clipping norm while it is in cache.
  FinishParam(p, param);
  if (p.clip) {
    p.square_sums[param] =
        ZeroPush(p, param)
            ? 0.0
            : SumOfSquares(
                  gpt_->grad_data(param),
                  static_cast<int64_t>(gpt_->params()[param].spec.numel()));
  }
  if (MayPush(p)) (void)PushParam(p, param, p.B);
}

void Trainer::FinishParam(const Pass& p, int param) {
  const int last = static_cast<int>(p.pieces.size()) - 1;
  if (last == 0) return;
  accumulator_.Finish(*gpt_, param, static_cast<float>(p.pieces[last]) / p.B);
}

void Trainer::ReduceParam(Pass& p, int param) {
  float* g = gpt_->grad_data(param);
  const size_t numel = gpt_->params()[param].spec.numel();
  if (p.share != 1.0f) {
    for (size_t k = 0; k < numel; ++k) g[k] *= p.share;
  }
  buckets_->Add(g, numel);
  p.reducing = true;
}

bool Trainer::MayPush(Pass& p) {
  if (!p.may_push.has_value()) p.may_push = PullAllowsStep(p.step);
  return *p.may_push;
}

void Trainer::Abandon(Pass& p) {
  (void)WaitAll(p.ops);  // pushes in flight read grad_data
  if (p.reducing) {
    comm_->Abort();  // the others would wait for this worker's share
    (void)WaitReduced();
  }
}

absl::StatusOr<float> Trainer::FinishGradients(Pass& p, float* grad_norm) {
  const int n = static_cast<int>(gpt_->params().size());
  if (!p.stream && !p.reduce) {
    for (int i = 0; i < n; ++i) FinishParam(p, i);
  }
  if (p.reduce) {
    buckets_->Flush();
    STRATA_RETURN_IF_ERROR(WaitReduced());
  }
  // Summed in parameter order whenever each part was taken: the same norm
  // as summing after backward.
  double sq = 0;
  for (int i = 0; i < n; ++i) {
    sq += p.square_sums[i]
              ? *p.square_sums[i]
              : SumOfSquares(
                    gpt_->grad_data(i),
                    static_cast<int64_t>(gpt_->params()[i].spec.numel()));
  }
  const double norm = std::sqrt(sq);
  *grad_norm = static_cast<float>(norm);
  // In double: a norm past float's range still gives a positive factor.
  return p.clip && norm > o_.grad_clip ? static_cast<float>(o_.grad_clip / norm)
                                       : 1.0f;
}

absl::Status Trainer::PushAndCommit(Pass& p, float scale) {
  if (!p.stream) {
    for (int i = static_cast<int>(gpt_->params().size()) - 1; i >= 0; --i) {
      if (scale != 1.0f) {
        float* g = gpt_->grad_data(i);
        const int64_t numel =
            static_cast<int64_t>(gpt_->params()[i].spec.numel());
        for (int64_t k = 0; k < numel; ++k) g[k] *= scale;
      }
      STRATA_RETURN_IF_ERROR(PushParam(p, i, p.reduce ? p.total : p.B));
    }
  }
  STRATA_RETURN_IF_ERROR(WaitAll(p.ops));
  const int64_t step = p.step;
  // BSP with LAMB or Adafactor: the update of a tensor cut into several
  // chunks waits for sums over it, which the workers drive (ReduceStep).
  const bool reduce = bsp() && ps_->needs_reduce();
  const bool commit_later = stamp_.deferred && bsp() && o_.pull_during_commit;
  if (stamp_.deferred && !commit_later) {
    // SSP/ASP pulls do not wait for this worker's step: they would read
    // the weights without it.
    STRATA_RETURN_IF_ERROR(ps_->Commit(step, scale));
  }
  if (commit_later || reduce) {
    // The next pulls wait at the gate for this step to close (and apply),
    // chunk by chunk: they go out while the servers apply the commit and
    // the sums (FinishPull collects the answer).
    commit_step_ = step;
    const StepStamp stamp = stamp_;
    commit_ = std::async(std::launch::async, [=, this] {
      if (commit_later) STRATA_RETURN_IF_ERROR(ps_->Commit(step, scale));
      return ps_->ReduceStep(step, stamp);
    });
  }
  return absl::OkStatus();
}

}  // namespace strata
