// Trainer's step: compute and push (through the servers, or reduced among
// the workers first), and the pulls around it. The loop is in trainer.cc.
#include <algorithm>
#include <cmath>
#include <future>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/kv_rendezvous.h"
#include "common/status.h"
#include "spdlog/spdlog.h"
#include "worker/trainer_impl.h"

namespace strata {
namespace {

void Append(std::vector<OpHandle>& ops, std::vector<OpHandle> more) {
  ops.insert(ops.end(), more.begin(), more.end());
}

}  // namespace

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

void Trainer::StartPull(int64_t clock, uint64_t prev_epoch, bool final) {
  pull_ = Pull{.clock = clock,
               .prev_epoch = prev_epoch,
               .final = final,
               .finished = false};
  const absl::Time t0 = absl::Now();
  SendPulls();
  pull_.waited += absl::Now() - t0;
}

void Trainer::SendPulls() {
  const bool bsp = mode_.mode == Consistency::kBsp;
  const int n = static_cast<int>(gpt_->params().size());
  pull_.ops.assign(n, {});
  for (int i = 0; i < n; ++i) {
    pull_.ops[i] = ps_->PullTensorAsync(
        i, gpt_->param_data(i), pull_.clock, bsp ? pull_.clock : 0,
        /*priority=*/n - i,
        StepStamp{.epoch = pull_.prev_epoch,
                  .generation = generation_,
                  .dtype = pull_.final ? std::optional(v1::DTYPE_F32)
                                       : std::nullopt});
  }
}

absl::Status Trainer::AwaitParam(int i) {
  const absl::Time t0 = absl::Now();
  absl::Status s = WaitAll(pull_.ops[i]);
  const absl::Duration waited = absl::Now() - t0;
  pull_.waited += waited;
  pull_.waited_in_pass += waited;
  if (!s.ok()) pull_.broke_pass = true;
  return s;
}

absl::StatusOr<uint64_t> Trainer::FinishPull() {
  if (pull_.finished) return pull_.result;
  const absl::Time t0 = absl::Now();
  auto wait_all = [this] {
    absl::Status first;
    for (const std::vector<OpHandle>& ops : pull_.ops) {
      absl::Status s = WaitAll(ops);
      if (first.ok()) first = s;
    }
    return first;
  };
  absl::Status pulled = wait_all();
  const bool during_commit = commit_.valid();
  const absl::Status committed =
      during_commit ? commit_.get() : absl::OkStatus();
  if (during_commit && committed.ok() && absl::IsDeadlineExceeded(pulled)) {
    // The pulls' wait at the gate (max_wait) counted the whole commit: a
    // long one (a server reading spilled tiles) outlasts it. It is done
    // now: pull again.
    SendPulls();
    pulled = wait_all();
  }
  pull_.finished = true;
  pull_.waited += absl::Now() - t0;
  if (!pulled.ok()) {
    // The servers answer ABORTED to pulls of a step whose commit failed:
    // the commit's own error says why.
    pull_.result = committed.ok() ? pulled : committed;
    return pull_.result;
  }
  if (!committed.ok()) {
    // Every chunk closed the step all the same (its retry had applied).
    spdlog::warn("strata worker: commit of step {}: {}; every chunk closed it",
                 commit_step_, committed.ToString());
  }
  uint64_t min_version = UINT64_MAX;
  for (const std::vector<OpHandle>& ops : pull_.ops) {
    for (const OpHandle& op : ops) {
      min_version = std::min(min_version, op.version());
    }
  }
  pull_.result = min_version;
  return pull_.result;
}

bool Trainer::PullAllowsStep(int64_t step) {
  const absl::StatusOr<uint64_t> pulled = FinishPull();
  if (!pulled.ok()) return false;
  return mode_.mode != Consistency::kBsp ||
         *pulled <= static_cast<uint64_t>(step);
}

void Trainer::SetStamp(const StepWork& work) {
  stamp_ =
      StepStamp{.epoch = work.stamp_epoch,
                .first_sample = static_cast<uint64_t>(work.units[0].first()),
                .generation = generation_};
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
  // Every pull finishes first, failed or not: one still in flight would
  // write into param_data later (FirstStep is called again after a
  // rollback).
  STRATA_RETURN_IF_ERROR(WaitAll(ops));
  for (auto& op : ops) {
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
  const bool reduce = o_.sync == SyncMode::kAllReduce;
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
  // Counts of an earlier attempt that failed (step-1's commit may be in
  // flight: its counts stay).
  ps_->ForgetDeferred(step);
  // Micro-batches: all but the last are kept, weighted by their share of
  // the samples; the last one's gradients complete the step's as backward
  // finishes each, and go out from there.
  const std::vector<int> pieces = GradAccumulator::Split(B, o_.micro_batches);
  const int last = static_cast<int>(pieces.size()) - 1;
  const float last_weight = static_cast<float>(pieces[last]) / B;
  auto finish = [&](int param) {
    if (last > 0) accumulator_.Finish(*gpt_, param, last_weight);
  };
  // Forward may start while this step's pulls are in flight (Run): the
  // first pass waits for each layer's weights before it reads them, and
  // no gradient goes out before every pull has landed and said this step
  // is this worker's to push (all of that before backward's first
  // gradient, since forward reads every parameter).
  const absl::Duration waited_before = pull_.waited_in_pass;
  std::optional<bool> may_push;
  auto pull_allows = [&] {
    if (!may_push) may_push = PullAllowsStep(step);
    return *may_push;
  };
  // Each parameter's sum of squared gradients, where taken during backward.
  const int n = static_cast<int>(gpt_->params().size());
  std::vector<std::optional<double>> square_sums(n);
  double loss_sum = 0;
  absl::Status failed;
  int first_row = 0;
  for (int k = 0; k <= last && failed.ok(); ++k) {
    if (k == 0 && !pull_.finished) {
      gpt_->SetParamWaitCallback(
          [this](int param) { return AwaitParam(param); });
    }
    if (k == last && stream) {
      // Push each gradient as soon as backward has finished it, and take
      // its share of the clipping norm while it is in cache.
      gpt_->SetGradReadyCallback([&](int param) {
        finish(param);
        if (clip) {
          square_sums[param] = SumOfSquares(
              gpt_->grad_data(param),
              static_cast<int64_t>(gpt_->params()[param].spec.numel()));
        }
        if (pull_allows()) (void)PushParam(param, step, B, ops);
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
    gpt_->SetParamWaitCallback(nullptr);
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
  // Without the pass's waits for the pulls (the ledger splits steps by
  // this). Not FinishPull's wait in the first grad-ready call: a GPU's
  // backward goes on meanwhile.
  compute_s_ = absl::ToDoubleSeconds(computed - t0 -
                                     (pull_.waited_in_pass - waited_before));
  if (failed.ok() && !pull_allows()) {
    failed = absl::AbortedError("this step's pulls did not let it go on");
  }
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
  // Summed in parameter order whenever each part was taken: the same norm
  // as summing after backward.
  double sq = 0;
  for (int i = 0; i < n; ++i) {
    sq += square_sums[i]
              ? *square_sums[i]
              : SumOfSquares(
                    gpt_->grad_data(i),
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
  if (stamp_.deferred && mode_.mode == Consistency::kBsp &&
      o_.pull_during_commit) {
    // The next pulls wait at the gate for this step to close, chunk by
    // chunk: they go out while the servers apply the commit (FinishPull
    // collects its answer).
    commit_step_ = step;
    commit_ = std::async(std::launch::async, [this, step, scale] {
      return ps_->Commit(step, scale);
    });
  } else if (stamp_.deferred) {
    // SSP/ASP pulls do not wait for this worker's step: they would read
    // the weights without it.
    STRATA_RETURN_IF_ERROR(ps_->Commit(step, scale));
  }
  sync_s_ = absl::ToDoubleSeconds(absl::Now() - computed);
  return loss;
}

}  // namespace strata
