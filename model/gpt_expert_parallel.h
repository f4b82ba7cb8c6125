// The MoE GPT with expert parallelism inside one worker (`--ep N`): N
// ranks, each a thread of this process running the whole dense model on
// its share of the batch's sequences (as data parallelism does) and only
// its E/N experts of every MoE layer, over every rank's tokens routed to
// them (GShard's dispatch and combine all-to-alls, model/moe_layer.h and
// model/moe_exchange.h), over an in-process communicator
// (collective/inproc_communicator.h).
//
// To the trainer it is a Model like Gpt: the same parameters in the same
// layout, the gradient of the same mean loss (the cross-entropy over the
// whole batch plus each MoE layer's load-balancing loss, whose f_i and
// P_i are over the whole batch). The weights and gradients stay in one
// host Gpt (the trainer pulls and pushes them, and UseStorage moves them
// as for Gpt); the ranks read the weights there without a copy, and each
// ForwardBackward adds the ranks' gradients into the host's in rank
// order.
//
// What differs from one Gpt: each rank's capacity per expert counts its
// own tokens (as each worker's does across workers), so with drops the
// losses differ; without drops they agree to rounding. A batch of fewer
// sequences than ranks runs on the host model alone (the same math).
//
// Where it stands: ranks are CPU threads only, sharing the process's one
// thread pool (common/parallel.h), so on one machine it runs no faster
// than Gpt; what it buys is the expert-parallel math, tested against Gpt,
// that GPU ranks over NCCL would run (a plan: no NCCL communicator exists
// yet). Every expert is pulled every step (the ranks route after the
// weights are in); the experts no rank's tokens reached still go as zero
// pushes (ParamUnused). Gradients are reported ready after the whole step.
// With --tp or --pp it is not built (CreateModel says so).
#ifndef STRATA_MODEL_GPT_EXPERT_PARALLEL_H_
#define STRATA_MODEL_GPT_EXPERT_PARALLEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/communicator.h"
#include "model/gpt.h"
#include "model/model.h"

namespace strata {

class ExpertParallelGpt : public Model {
 public:
  // INVALID_ARGUMENT for a bad config, a dense one (experts == 0), ranks
  // < 1 or > 64, or ranks that do not divide the experts.
  static absl::StatusOr<std::unique_ptr<ExpertParallelGpt>> Create(
      const GptConfig& config, int ranks);
  ~ExpertParallelGpt() override;

  int ranks() const { return static_cast<int>(ranks_.size()); }
  // As Gpt::InitParams: the same values for the same seed.
  void InitParams(uint64_t seed) { host_->InitParams(seed); }

  const GptConfig& config() const override { return host_->config(); }
  const std::vector<ParamInfo>& params() const override {
    return host_->params();
  }
  float* param_data(int i) override { return host_->param_data(i); }
  float* grad_data(int i) override { return host_->grad_data(i); }
  int64_t storage_floats() const override { return host_->storage_floats(); }
  absl::Status UseStorage(float* storage,
                          std::shared_ptr<const void> owner) override {
    return host_->UseStorage(storage, std::move(owner));
  }

  // Model's contract, over the ranks. Every parameter is named wanted
  // and waited for first; grad-ready calls come after every rank is done,
  // in the order Gpt makes them (rank 0's, replayed). A failure of one rank (a
  // communicator error, a router logit that is not finite) fails the call; the
  // next call starts a new group.
  absl::StatusOr<float> ForwardBackward(const int32_t* tokens,
                                        const int32_t* targets, int B, int T,
                                        bool accumulate = false) override;
  // The loss of the whole model on the host (evaluation only).
  absl::StatusOr<float> Loss(const int32_t* tokens, const int32_t* targets,
                             int B, int T) override;
  void SetGradReadyCallback(std::function<void(int)> cb) override {
    grad_ready_ = std::move(cb);
  }
  void SetParamWaitCallback(std::function<absl::Status(int)> cb) override {
    param_wait_ = std::move(cb);
  }
  void SetParamsWantedCallback(
      std::function<void(absl::Span<const int>)> cb) override {
    params_wanted_ = std::move(cb);
  }
  bool RoutedParam(int i) const override { return host_->RoutedParam(i); }
  // True when no rank's tokens reached the expert in the last pass.
  bool ParamUnused(int i) const override;
  // The last pass's routing over every rank: loads, drops and assignments
  // summed, aux (the same on every rank) once.
  MoeStats moe_stats() const override;
  int64_t num_params() const override { return host_->num_params(); }
  double flops_per_token() const override { return host_->flops_per_token(); }
  std::string device() const override { return "cpu"; }
  double peak_flops() const override { return 0; }

 private:
  explicit ExpertParallelGpt(std::unique_ptr<Gpt> host);
  absl::Status MakeGroup(int ranks);
  // Names every routed parameter wanted, then waits for every parameter.
  absl::Status AwaitAllParams();
  // Runs the ranks on their rows; the loss over the batch.
  absl::StatusOr<float> RunRanks(const int32_t* tokens, const int32_t* targets,
                                 int B, int T);
  // host gradients (+)= the ranks' sum, in rank order.
  void AddRankGrads(bool accumulate);
  void ReportGradsReady();

  std::unique_ptr<Gpt> host_;  // the weights and gradients
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<Gpt>> ranks_;
  std::function<void(int)> grad_ready_;
  std::function<absl::Status(int)> param_wait_;
  std::function<void(absl::Span<const int>)> params_wanted_;
  std::vector<int> routed_;       // the routed parameters, for params_wanted_
  std::vector<int> ready_order_;  // the last pass's, as Gpt reported it
  bool broken_ = false;           // a rank failed: the group is aborted
  bool last_on_host_ = true;      // the last pass ran on host_ alone
};

}  // namespace strata

#endif  // STRATA_MODEL_GPT_EXPERT_PARALLEL_H_
