// Trainer's sync with the servers and the all-reduce group: the step's
// pulls, its pushes, the group it reduces in. The loop is in trainer.cc,
// a step's computation in trainer_compute.cc.
#include <algorithm>
#include <cmath>
#include <future>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/kv_rendezvous.h"
#include "common/status.h"
#include "model/gpt_layout.h"
#include "spdlog/spdlog.h"
#include "trainer/trainer_impl.h"

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
  // A pull sent late (an expert wanted by a pass that then failed) may
  // still be in flight: it must not write into param_data from here on.
  for (const std::vector<OpHandle>& ops : pull_.ops) (void)WaitAll(ops);
  pull_ = Pull{.clock = clock,
               .prev_epoch = prev_epoch,
               .final = final,
               .finished = false};
  const absl::Time t0 = absl::Now();
  SendPulls();
  pull_.waited += absl::Now() - t0;
}

void Trainer::SendPulls(bool again) {
  const int n = static_cast<int>(gpt_->params().size());
  if (!again) {
    pull_.ops.assign(n, {});
    pull_.expert_floats = 0;
  }
  const bool all = PullsAllExperts();
  for (int i = 0; i < n; ++i) {
    const bool skip = again ? pull_.ops[i].empty()
                            : !all && gpt_->RoutedParam(i) && !used_last_[i];
    if (!skip) SendPull(i);
  }
}

void Trainer::SendPull(int i) {
  const int n = static_cast<int>(gpt_->params().size());
  const bool again = !pull_.ops[i].empty();  // FinishPull's second try
  pull_.ops[i] = ps_->PullTensorAsync(
      i, gpt_->param_data(i), pull_.clock, bsp() ? pull_.clock : 0,
      /*priority=*/n - i,
      StepStamp{
          .epoch = pull_.prev_epoch,
          .generation = generation_,
          .dtype = pull_.final ? std::optional(v1::DTYPE_F32) : std::nullopt});
  if (sparse_ && !again && gpt_->RoutedParam(i)) {
    pull_.expert_floats += static_cast<int64_t>(gpt_->params()[i].spec.numel());
  }
}

bool Trainer::PullsAllExperts() const {
  // The final weights, a first step (nothing to go by), and the weights
  // rank 0 evaluates (its eval routes other tokens) are whole.
  return !sparse_ || pull_.final || used_last_.empty() || EvalDue(pull_.clock);
}

void Trainer::WantParams(absl::Span<const int> params) {
  const absl::Time t0 = absl::Now();
  for (int i : params) {
    if (pull_.ops[i].empty()) SendPull(i);
  }
  pull_.waited += absl::Now() - t0;
}

absl::Status Trainer::AwaitParam(int i) {
  const absl::Time t0 = absl::Now();
  if (pull_.ops[i].empty()) SendPull(i);  // an expert just routed to
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
    SendPulls(/*again=*/true);
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

void Trainer::FollowMode(const StepWork& work, int64_t step) {
  const Consistency now = LeasedMode(work, scheduler_->view());
  if (now.ToString() == mode_.ToString()) return;
  if (work.bsp) {
    // Back to BSP by a lease of its step (this worker's next clock).
    schedule_offset_ = work.schedule_offset;
    spdlog::info(
        "strata worker: the job runs bsp from step {} (job step {}; was {})",
        step, JobStep(step), mode_.ToString());
  } else {
    spdlog::info("strata worker: the job runs {} from step {} (was {})",
                 now.ToString(), step, mode_.ToString());
  }
  mode_ = now;
}

bool Trainer::StillBsp(int64_t step, absl::Duration wait) {
  if (!bsp() || !auto_consistency_) return bsp();
  if (std::optional<Consistency> now = LeftBsp(*scheduler_, wait)) {
    spdlog::info("strata worker: the job runs {} from step {} (was {})",
                 now->ToString(), step, mode_.ToString());
    mode_ = *now;
  }
  return bsp();
}

void Trainer::SetStamp(const StepWork& work) {
  stamp_ =
      StepStamp{.epoch = work.stamp_epoch,
                .first_sample = static_cast<uint64_t>(work.units[0].first()),
                .generation = generation_};
  // Under BSP the servers ignore it; a lease is never above the batch.
  if (o_.async_lr_share) {
    stamp_.async_lr_scale =
        static_cast<float>(std::min(1.0, static_cast<double>(work.samples) /
                                             static_cast<double>(o_.batch)));
  }
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

absl::Status Trainer::PushParam(Pass& p, int param, uint64_t samples) {
  StepStamp stamp = stamp_;
  stamp.zero = ZeroPush(p, param);
  if (sparse_ && gpt_->RoutedParam(param) && !stamp.zero) {
    p.expert_floats_pushed +=
        static_cast<int64_t>(gpt_->params()[param].spec.numel());
  }
  // Last layers first: their gradients are ready first and the next step's
  // pulls want the first layers, so the two streams interleave.
  Append(p.ops, ps_->PushTensorAsync(param, gpt_->grad_data(param), p.step,
                                     samples, /*priority=*/param, stamp));
  return absl::OkStatus();
}

bool Trainer::ZeroPush(const Pass& p, int param) const {
  return sparse_ && gpt_->RoutedParam(param) && !p.used[param] &&
         gpt_->ParamUnused(param);
}

void Trainer::NoteUsed(Pass& p) {
  const int n = static_cast<int>(gpt_->params().size());
  for (int i = 0; i < n; ++i) {
    if (gpt_->RoutedParam(i) && !gpt_->ParamUnused(i)) p.used[i] = 1;
  }
}

void Trainer::InitExperts() {
  // The experts' floats from the layout (model/gpt_layout.h): a model that
  // names no routed parameter (ParallelGpt) moves them all, densely.
  const GptConfig& c = gpt_->config();
  bool routed = false;
  for (int l = 0, first = gpt_layout::kFirstBlockParam; l < c.layers; ++l) {
    const int count = gpt_layout::ParamsInLayer(c.IsMoeLayer(l), c.experts);
    for (int i = first + gpt_layout::kMoeRouter + 1;
         c.IsMoeLayer(l) && i < first + count; ++i) {
      expert_floats_ += static_cast<int64_t>(gpt_->params()[i].spec.numel());
      routed = routed || gpt_->RoutedParam(i);
    }
    first += count;
  }
  sparse_ = o_.sparse_experts && o_.sync == SyncMode::kPs && routed;
  if (o_.metrics != nullptr && gpt_->config().experts > 0) {
    std::vector<int> layers;
    for (int l = 0; l < gpt_->config().layers; ++l) {
      if (gpt_->config().IsMoeLayer(l)) layers.push_back(l);
    }
    expert_metrics_ = std::make_unique<ExpertMetrics>(*o_.metrics, layers,
                                                      gpt_->config().experts);
  }
}

bool Trainer::EvalDue(int64_t step) const {
  return rank_ == 0 && o_.eval_every > 0 && step >= 0 &&
         ((step + 1) % o_.eval_every == 0 || step + 1 == o_.steps);
}

}  // namespace strata
