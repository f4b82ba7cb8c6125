#include "model/gpt_parallel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/inproc_communicator.h"
#include "common/status.h"
#include "model/gpt_layout.h"
#include "model/rank_threads.h"
#include "model_parallel/pipeline.h"

namespace strata {
namespace {

using namespace ::strata::gpt_layout;  // NOLINT: the shared parameter layout

// Sizes of the micro-batches `rows` sequences split into: min(pieces,
// rows) of them, as equal as can be, the larger first.
std::vector<int> SplitRows(int rows, int pieces) {
  pieces = std::max(1, std::min(pieces, rows));
  std::vector<int> sizes(pieces, rows / pieces);
  for (int k = 0; k < rows % pieces; ++k) sizes[k]++;
  return sizes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParallelGpt>> ParallelGpt::Create(
    const GptConfig& config, ModelParallelism par) {
  STRATA_RETURN_IF_ERROR(config.Validate());
  if (par.tp < 1 || par.tp > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp must be in [1, 64], got ", par.tp));
  }
  if (par.pp < 1 || par.pp > config.layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pp must be in [1, layers (", config.layers,
                     ")]: every stage needs a block; got ", par.pp));
  }
  if (par.micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--micro_batches must be >= 1, got ", par.micro_batches));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> host, Gpt::Create(config));
  std::unique_ptr<ParallelGpt> gpt(new ParallelGpt(par, std::move(host)));
  STRATA_RETURN_IF_ERROR(gpt->MakeGroups());
  return gpt;
}

ParallelGpt::ParallelGpt(ModelParallelism par, std::unique_ptr<Gpt> host)
    : par_(par), host_(std::move(host)) {}

ParallelGpt::~ParallelGpt() = default;

absl::Status ParallelGpt::MakeGroups() {
  const int tp = par_.tp, pp = par_.pp;
  stages_.clear();  // they point at the communicators
  tp_comms_.clear();
  pp_comms_.clear();
  tp_comms_.resize(tp * pp);
  pp_comms_.resize(tp * pp);
  // The peers are threads of this process: only a kernel that never
  // returns could keep one waiting this long.
  CommunicatorOptions options;
  options.timeout = absl::Minutes(10);
  for (int s = 0; s < pp; ++s) {
    STRATA_ASSIGN_OR_RETURN(auto group, MakeInProcGroup(tp, options));
    for (int t = 0; t < tp; ++t) tp_comms_[s * tp + t] = std::move(group[t]);
  }
  for (int t = 0; t < tp; ++t) {
    STRATA_ASSIGN_OR_RETURN(auto group, MakeInProcGroup(pp, options));
    for (int s = 0; s < pp; ++s) pp_comms_[s * tp + t] = std::move(group[s]);
  }
  for (int r = 0; r < tp * pp; ++r) {
    StagePlace place = PlaceStage(config().layers, pp, r / tp);
    place.tp_rank = r % tp;
    place.tp_size = tp;
    stages_.push_back(
        std::make_unique<GptStage>(config(), place, tp_comms_[r].get()));
  }
  return absl::OkStatus();
}

absl::StatusOr<float> ParallelGpt::ForwardBackward(const int32_t* tokens,
                                                   const int32_t* targets,
                                                   int B, int T,
                                                   bool accumulate) {
  STRATA_RETURN_IF_ERROR(ValidateBatch(config(), tokens, targets, B, T));
  STRATA_RETURN_IF_ERROR(AwaitAllParams());
  if (broken_) {
    STRATA_RETURN_IF_ERROR(MakeGroups());
    broken_ = false;
  }
  const int ranks = par_.tp * par_.pp;
  Batch batch{tokens, targets, T, SplitRows(B, par_.micro_batches), {}, 0};
  const int m = static_cast<int>(batch.rows.size());
  batch.first_row.assign(m, 0);
  for (int k = 1; k < m; ++k) {
    batch.first_row[k] = batch.first_row[k - 1] + batch.rows[k - 1];
  }
  batch.dloss = 1.0f / (static_cast<float>(B) * T);

  // Ranks write their gradients into the host's (model/gpt_stage.h).
  if (!accumulate) {
    for (size_t i = 0; i < params().size(); ++i) {
      std::fill_n(grad_data(static_cast<int>(i)), params()[i].spec.numel(),
                  0.0f);
    }
  }
  std::vector<double> loss(ranks, 0.0);
  const absl::Status failed = RunOnRankThreads(
      ranks, [&](int r) { return RunRank(r, batch, &loss[r]); },
      [&](int r) {
        tp_comms_[r]->Abort();  // the stage's other ranks wait on this one
        pp_comms_[r]->Abort();
      });
  if (!failed.ok()) {
    broken_ = true;
    return failed;
  }

  for (const auto& stage : stages_) stage->AddGrads(*host_);
  ReportGradsReady();
  const int last_stage_rank = (par_.pp - 1) * par_.tp;
  return static_cast<float>(loss[last_stage_rank] /
                            (static_cast<double>(B) * T));
}

absl::Status ParallelGpt::RunRank(int r, const Batch& b, double* loss) {
  GptStage& stage = *stages_[r];
  const int m = static_cast<int>(b.rows.size());
  // A stage holds at most (stages - stage) micro-batches in flight under
  // 1F1B, and finishes them in order: micro-batch k's slot is free again by
  // the forward of k + slots.
  const int slots = std::min(par_.pp - r / par_.tp, m);
  stage.LoadWeights(*host_);
  stage.Prepare(b.rows[0], b.T, slots);
  StageFunctions f;
  f.forward = [&](int mb, std::vector<float> input) {
    const size_t at = static_cast<size_t>(b.first_row[mb]) * b.T;
    return stage.Forward(mb % slots, b.tokens + at, b.targets + at, b.rows[mb],
                         b.dloss, std::move(input), loss);
  };
  f.backward = [&](int mb, std::vector<float> grad_output) {
    const size_t at = static_cast<size_t>(b.first_row[mb]) * b.T;
    return stage.Backward(mb % slots, b.tokens + at, b.rows[mb],
                          std::move(grad_output));
  };
  return RunPipelineStep(*pp_comms_[r], m, stage.boundary_elems(), f);
}

void ParallelGpt::ReportGradsReady() {
  if (!grad_ready_) return;
  const int L = config().layers;
  const int lnf = host_->first_param(L);
  grad_ready_(lnf);
  grad_ready_(lnf + 1);
  for (int l = L - 1; l >= 0; --l) {
    const int base = host_->first_param(l);
    if (config().IsMoeLayer(l)) {
      // As Gpt's MoE backward: the router and every expert, in order.
      for (int i = base + kMoeRouter; i < host_->first_param(l + 1); ++i) {
        grad_ready_(i);
      }
    }
    for (int slot : {kFcProjW, kFcW, kLn2W, kAttnProjW, kQkvW, kLn1W}) {
      if (config().IsMoeLayer(l) && (slot == kFcProjW || slot == kFcW)) {
        continue;
      }
      grad_ready_(base + slot);
      grad_ready_(base + slot + 1);
    }
  }
  grad_ready_(kWpe);
  grad_ready_(kWte);
}

absl::Status ParallelGpt::AwaitAllParams() {
  if (!param_wait_) return absl::OkStatus();
  for (int i = 0; i < static_cast<int>(params().size()); ++i) {
    STRATA_RETURN_IF_ERROR(param_wait_(i));
  }
  return absl::OkStatus();
}

absl::StatusOr<float> ParallelGpt::Loss(const int32_t* tokens,
                                        const int32_t* targets, int B, int T) {
  STRATA_RETURN_IF_ERROR(ValidateBatch(config(), tokens, targets, B, T));
  STRATA_RETURN_IF_ERROR(AwaitAllParams());
  return host_->Loss(tokens, targets, B, T);
}

MoeStats ParallelGpt::moe_stats() const {
  MoeStats s;
  // Tensor rank 0 of each stage, in stage order: the layers in order.
  for (int stage = 0; stage < par_.pp; ++stage) {
    const MoeStats part = stages_[size_t(stage) * par_.tp]->moe_stats();
    s.aux_loss += part.aux_loss;
    s.dropped += part.dropped;
    s.assignments += part.assignments;
    s.load.insert(s.load.end(), part.load.begin(), part.load.end());
  }
  return s;
}

}  // namespace strata
