// The GPT with tensor and pipeline parallelism inside one worker
// (`--tp`, `--pp`): tp x pp ranks, each a thread of this process holding
// its share of the model (model/gpt_stage.h), over in-process
// communicators (collective/inproc_communicator.h).
//
// Rank (stage s, tensor rank t) is in stage s's tensor group (tp ranks,
// Megatron 1D) and in tensor rank t's pipeline group (pp stages, 1F1B
// over `micro_batches` micro-batches, model_parallel/pipeline.h). To the
// trainer it is a Model like Gpt: the same parameters in the same layout,
// the gradient of the same mean loss. The whole weights and gradients stay
// in host buffers (the trainer pulls and pushes them as for Gpt); each
// ForwardBackward hands every rank its shards and adds their gradients
// back.
//
// Where it stands: ranks are CPU threads only, and the kernels of all
// ranks share the process's one thread pool (common/parallel.h), so on one
// machine the split runs no faster than the whole model: what it buys is
// the parallel math, tested against Gpt, that GPU ranks over NCCL would
// run (a plan: no NCCL communicator exists yet). Gradients are reported
// ready after the whole step, not during backward.
#ifndef STRATA_MODEL_GPT_PARALLEL_H_
#define STRATA_MODEL_GPT_PARALLEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/communicator.h"
#include "model/gpt.h"
#include "model/gpt_stage.h"
#include "model/model.h"

namespace strata {

class ParallelGpt : public Model {
 public:
  // INVALID_ARGUMENT for a bad config, tp or pp < 1, tp > 64, pp > layers
  // or micro_batches < 1.
  static absl::StatusOr<std::unique_ptr<ParallelGpt>> Create(
      const GptConfig& config, ModelParallelism parallelism);
  ~ParallelGpt() override;

  const ModelParallelism& parallelism() const { return par_; }
  // As Gpt::InitParams: the same values for the same seed.
  void InitParams(uint64_t seed) { host_->InitParams(seed); }

  const GptConfig& config() const override { return host_->config(); }
  const std::vector<ParamInfo>& params() const override {
    return host_->params();
  }
  float* param_data(int i) override { return host_->param_data(i); }
  float* grad_data(int i) override { return host_->grad_data(i); }
  // Model's contract, over the ranks. Grad-ready calls come after every
  // rank is done, in Gpt's order. A failure of one rank (a communicator
  // error) fails the call; the next call starts new groups.
  absl::StatusOr<float> ForwardBackward(const int32_t* tokens,
                                        const int32_t* targets, int B, int T,
                                        bool accumulate = false) override;
  // The loss of the whole model on the host (no split: evaluation only).
  absl::StatusOr<float> Loss(const int32_t* tokens, const int32_t* targets,
                             int B, int T) override;
  void SetGradReadyCallback(std::function<void(int)> cb) override {
    grad_ready_ = std::move(cb);
  }
  // Every parameter is waited for before the ranks get their shards: no
  // overlap of forward with the pulls here.
  void SetParamWaitCallback(std::function<absl::Status(int)> cb) override {
    param_wait_ = std::move(cb);
  }
  // Mixture-of-experts blocks run whole on every rank of their stage's
  // tensor group (model/gpt_stage.h); every expert is waited for and its
  // gradient reported (no RoutedParam: the trainer moves them densely, as
  // --sparse_experts false). The stats are over the step's micro-batches.
  MoeStats moe_stats() const override;
  int64_t num_params() const override { return host_->num_params(); }
  double flops_per_token() const override { return host_->flops_per_token(); }
  std::string device() const override { return "cpu"; }
  double peak_flops() const override { return 0; }

 private:
  ParallelGpt(ModelParallelism par, std::unique_ptr<Gpt> host);
  absl::Status MakeGroups();
  void ReportGradsReady();
  // Calls param_wait_ for every parameter, in order, if set.
  absl::Status AwaitAllParams();
  // A step's batch as the ranks share it: (rows, T) micro-batches starting
  // at first_row, the loss gradient scaled by dloss.
  struct Batch {
    const int32_t* tokens;
    const int32_t* targets;
    int T;
    std::vector<int> rows;
    std::vector<int> first_row;
    float dloss;
  };
  // Rank r's share of the step: its stage's 1F1B schedule over the
  // micro-batches, adding the last stage's summed loss to *loss. Errors:
  // the communicators'.
  absl::Status RunRank(int r, const Batch& b, double* loss);

  const ModelParallelism par_;
  std::unique_ptr<Gpt> host_;  // the whole weights and gradients
  // Rank r = stage * tp + tensor rank.
  std::vector<std::unique_ptr<Communicator>> tp_comms_, pp_comms_;
  std::vector<std::unique_ptr<GptStage>> stages_;
  std::function<void(int)> grad_ready_;
  std::function<absl::Status(int)> param_wait_;
  bool broken_ = false;  // a rank failed: the groups are aborted
};

}  // namespace strata

#endif  // STRATA_MODEL_GPT_PARALLEL_H_
