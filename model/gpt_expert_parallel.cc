#include "model/gpt_expert_parallel.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/inproc_communicator.h"
#include "common/parallel.h"
#include "common/status.h"
#include "model/rank_threads.h"

namespace strata {

absl::StatusOr<std::unique_ptr<ExpertParallelGpt>> ExpertParallelGpt::Create(
    const GptConfig& config, int ranks) {
  STRATA_RETURN_IF_ERROR(config.Validate());
  if (config.experts == 0) {
    return absl::InvalidArgumentError(
        "--ep splits a mixture of experts: it needs --experts");
  }
  if (ranks < 1 || ranks > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ep must be in [1, 64], got ", ranks));
  }
  if (config.experts % ranks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ep ", ranks, " must divide --experts ", config.experts,
                     ": every rank holds as many experts"));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> host, Gpt::Create(config));
  std::unique_ptr<ExpertParallelGpt> gpt(
      new ExpertParallelGpt(std::move(host)));
  for (int r = 0; r < ranks; ++r) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> rank, Gpt::Create(config));
    rank->ReadWeightsOf(*gpt->host_);
    gpt->ranks_.push_back(std::move(rank));
  }
  STRATA_RETURN_IF_ERROR(gpt->MakeGroup(ranks));
  // Rank 0 runs every layer, so it reports every parameter, in Gpt's
  // order; the host does when a batch runs there.
  auto note = [g = gpt.get()](int i) { g->ready_order_.push_back(i); };
  gpt->ranks_[0]->SetGradReadyCallback(note);
  gpt->host_->SetGradReadyCallback(note);
  for (int i = 0; i < static_cast<int>(gpt->params().size()); ++i) {
    if (gpt->RoutedParam(i)) gpt->routed_.push_back(i);
  }
  return gpt;
}

ExpertParallelGpt::ExpertParallelGpt(std::unique_ptr<Gpt> host)
    : host_(std::move(host)) {}

ExpertParallelGpt::~ExpertParallelGpt() {
  ranks_.clear();  // their MoE layers point at the communicators
}

absl::Status ExpertParallelGpt::MakeGroup(int ranks) {
  // The peers are threads of this process: only a kernel that never
  // returns could keep one waiting this long.
  CommunicatorOptions options;
  options.timeout = absl::Minutes(10);
  STRATA_ASSIGN_OR_RETURN(comms_, MakeInProcGroup(ranks, options));
  for (int r = 0; r < ranks; ++r) ranks_[r]->SetExpertGroup(comms_[r].get());
  return absl::OkStatus();
}

absl::Status ExpertParallelGpt::AwaitAllParams() {
  if (params_wanted_ && !routed_.empty()) params_wanted_(routed_);
  if (!param_wait_) return absl::OkStatus();
  for (int i = 0; i < static_cast<int>(params().size()); ++i) {
    STRATA_RETURN_IF_ERROR(param_wait_(i));
  }
  return absl::OkStatus();
}

absl::StatusOr<float> ExpertParallelGpt::ForwardBackward(const int32_t* tokens,
                                                         const int32_t* targets,
                                                         int B, int T,
                                                         bool accumulate) {
  STRATA_RETURN_IF_ERROR(ValidateBatch(config(), tokens, targets, B, T));
  STRATA_RETURN_IF_ERROR(AwaitAllParams());
  ready_order_.clear();
  if (B < ranks()) {
    // A rank without a sequence has nothing to route: the host model
    // runs the batch, every expert there.
    last_on_host_ = true;
    absl::StatusOr<float> loss =
        host_->ForwardBackward(tokens, targets, B, T, accumulate);
    if (loss.ok()) ReportGradsReady();
    return loss;
  }
  if (broken_) {
    STRATA_RETURN_IF_ERROR(MakeGroup(ranks()));
    broken_ = false;
  }
  last_on_host_ = false;
  STRATA_ASSIGN_OR_RETURN(const float loss, RunRanks(tokens, targets, B, T));
  AddRankGrads(accumulate);
  ReportGradsReady();
  return loss;
}

absl::StatusOr<float> ExpertParallelGpt::RunRanks(const int32_t* tokens,
                                                  const int32_t* targets, int B,
                                                  int T) {
  const int P = ranks();
  std::vector<int> first(P + 1, 0);  // rank r's rows: [first[r], first[r+1])
  for (int r = 0; r < P; ++r) {
    first[r + 1] = first[r] + B / P + (r < B % P ? 1 : 0);
  }
  std::vector<float> loss(P, 0.0f);
  auto run = [&](int r) -> absl::Status {
    Gpt& rank = *ranks_[r];
    rank.ReadWeightsOf(*host_);  // wherever UseStorage has put them
    rank.SetLossTokens(int64_t{B} * T);
    const size_t at = size_t{1} * first[r] * T;
    STRATA_ASSIGN_OR_RETURN(loss[r],
                            rank.ForwardBackward(tokens + at, targets + at,
                                                 first[r + 1] - first[r], T));
    return absl::OkStatus();
  };
  const absl::Status failed = RunOnRankThreads(
      P, run, [&](int r) { comms_[r]->Abort(); });  // the others wait on it
  if (!failed.ok()) {
    broken_ = true;
    return failed;
  }
  double total = 0;
  for (int r = 0; r < P; ++r) {
    total += double{loss[r]} * (first[r + 1] - first[r]);
  }
  return static_cast<float>(total / B);
}

void ExpertParallelGpt::AddRankGrads(bool accumulate) {
  for (int i = 0; i < static_cast<int>(params().size()); ++i) {
    float* g = host_->grad_data(i);
    const int64_t n = static_cast<int64_t>(params()[i].spec.numel());
    ParallelFor(n, int64_t{1} << 16, [&](int, int64_t begin, int64_t end) {
      if (!accumulate) std::fill(g + begin, g + end, 0.0f);
      for (const auto& rank : ranks_) {
        const float* from = rank->grad_data(i);
        for (int64_t k = begin; k < end; ++k) g[k] += from[k];
      }
    });
  }
}

void ExpertParallelGpt::ReportGradsReady() {
  if (!grad_ready_) return;
  // Gpt's own order, as rank 0 (or the host) reported it: every rank
  // issues its collectives by it (collective/grad_buckets.h).
  for (int i : ready_order_) grad_ready_(i);
}

bool ExpertParallelGpt::ParamUnused(int i) const {
  if (last_on_host_) return host_->ParamUnused(i);
  for (const auto& rank : ranks_) {
    if (!rank->ParamUnused(i)) return false;
  }
  return true;
}

MoeStats ExpertParallelGpt::moe_stats() const {
  if (last_on_host_) return host_->moe_stats();
  MoeStats sum = ranks_[0]->moe_stats();
  for (size_t r = 1; r < ranks_.size(); ++r) {
    const MoeStats s = ranks_[r]->moe_stats();
    sum.dropped += s.dropped;
    sum.assignments += s.assignments;
    for (size_t l = 0; l < sum.load.size(); ++l) {
      for (size_t e = 0; e < sum.load[l].size(); ++e) {
        sum.load[l][e] += s.load[l][e];
      }
    }
  }
  return sum;
}

absl::StatusOr<float> ExpertParallelGpt::Loss(const int32_t* tokens,
                                              const int32_t* targets, int B,
                                              int T) {
  STRATA_RETURN_IF_ERROR(ValidateBatch(config(), tokens, targets, B, T));
  STRATA_RETURN_IF_ERROR(AwaitAllParams());
  last_on_host_ = true;
  return host_->Loss(tokens, targets, B, T);
}

}  // namespace strata
