// A GPT-2 style decoder on the CPU: fp32 parameters and gradients, forward
// and backward through the kernels in kernels/.
//
// Pre-LN blocks (attention, then a 4x GELU MLP), learned position
// embeddings, a final LayerNorm and an LM head tied to the token embedding.
// Parameters are separate named tensors (params()), stored contiguously;
// the trainer reads and writes them through param_data()/grad_data().
#ifndef STRATA_MODEL_GPT_H_
#define STRATA_MODEL_GPT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/moe_router.h"

namespace strata {

class Communicator;
struct CpuBlockOps;
struct MoeRouting;

// The parameters of a GPT of `config` (what Gpt::params() lists), without
// their storage: names, shapes, groups and inits.
std::vector<ParamInfo> GptParams(const GptConfig& config);

// The MoE layers' settings of `config` for passes of `tokens` tokens.
MoeDims MoeLayerDims(const GptConfig& config, int tokens);

// The model on the CPU (device "cpu"). Not thread-safe: one call at a time.
// The kernels it calls use the process-wide thread pool
// (common/parallel.h).
class Gpt : public Model {
 public:
  // Builds a model with zeroed parameters (call InitParams). INVALID_ARGUMENT
  // for a bad config.
  static absl::StatusOr<std::unique_ptr<Gpt>> Create(const GptConfig& config);

  ~Gpt() override;
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const override { return config_; }

  // The parameter tensors in forward order: wte, wpe, then per block
  // ln1.{weight,bias}, attn.qkv.{weight,bias}, attn.proj.{weight,bias},
  // ln2.{weight,bias}, mlp.fc.{weight,bias}, mlp.proj.{weight,bias}, then
  // lnf.{weight,bias}. Matrices are (out, in).
  const std::vector<ParamInfo>& params() const override { return params_; }

  // Parameter i's values and gradient: spec.numel() fp32 values each, owned
  // by the model (or in the storage UseStorage gave it), valid for its
  // lifetime; UseStorage moves them, so pointers taken before it are no
  // longer the model's. REQUIRES: 0 <= i < params().size().
  float* param_data(int i) override;
  float* grad_data(int i) override;

  // Model's storage contract (model/model.h). INVALID_ARGUMENT for
  // storage not aligned to 64 bytes.
  int64_t storage_floats() const override { return 2 * padded_floats_; }
  absl::Status UseStorage(float* storage,
                          std::shared_ptr<const void> owner) override;

  // For one rank of an expert-parallel model (model/gpt_expert_parallel.h):
  // the MoE layers run over `group` (model/moe_layer.h), which must outlive
  // the model; null: every expert here (the default).
  void SetExpertGroup(Communicator* group);
  // From now on the weights are read from `host` (a model of the same
  // config, which must outlive this one or be given again; no copy), and
  // this model's own storage holds only its gradients. Call again after
  // host.UseStorage.
  void ReadWeightsOf(const Gpt& host);
  // ForwardBackward's gradient is of the cross-entropy summed over the
  // batch and divided by `tokens` (> 0), not by B·T: a rank's share of a
  // mean over several ranks' tokens. 0 (the default): B·T. The loss it
  // returns is its own batch's mean either way.
  void SetLossTokens(int64_t tokens) { loss_tokens_ = tokens; }

  // Fills every parameter per its ParamInfo (GPT-2 init: N(0, 0.02), the
  // residual projections scaled by 1/sqrt(2 * layers)), deterministically
  // from `seed`.
  void InitParams(uint64_t seed);

  // Model's contract (model/model.h), on the host.
  absl::StatusOr<float> ForwardBackward(const int32_t* tokens,
                                        const int32_t* targets, int B, int T,
                                        bool accumulate = false) override;
  absl::StatusOr<float> Loss(const int32_t* tokens, const int32_t* targets,
                             int B, int T) override;
  void SetGradReadyCallback(std::function<void(int param_index)> cb) override;
  // Waits for each block's parameters together before the block's forward
  // (the embeddings first, the final LayerNorm last).
  void SetParamWaitCallback(
      std::function<absl::Status(int param_index)> cb) override;
  // An MoE block waits for its attention half, LayerNorms and router
  // first; once routed, for the experts with tokens alone (named first to
  // the params-wanted function).
  bool RoutedParam(int i) const override;
  void SetParamsWantedCallback(
      std::function<void(absl::Span<const int>)> cb) override;
  bool ParamUnused(int i) const override;
  // Whether parameter i is an expert's, and whose.
  bool ExpertOf(int i, int* layer, int* expert) const;
  // The index of block `layer`'s first parameter; of the final LayerNorm's
  // for layer == config().layers.
  int first_param(int layer) const { return first_param_[layer]; }

  // The (B,T,vocab) logits of (B,T) tokens (row-major, host memory), the
  // weights in param_data: what the LM head gives before the softmax.
  // INVALID_ARGUMENT as ForwardBackward.
  absl::StatusOr<std::vector<float>> Logits(const int32_t* tokens, int B,
                                            int T);

  // Extends `prompt` by new_tokens tokens, sampled from the model (the last
  // `context` tokens are its input) at `temperature` (<= 0: greedy), with a
  // generator seeded by `seed`, among the ids below `sample_vocab` (0: all
  // of the vocabulary). Returns prompt followed by the new tokens.
  // INVALID_ARGUMENT for an empty prompt, a token outside [0, vocab) or a
  // negative new_tokens.
  absl::StatusOr<std::vector<int32_t>> Generate(std::vector<int32_t> prompt,
                                                int new_tokens,
                                                float temperature,
                                                uint64_t seed,
                                                int sample_vocab = 0);

  // The number of parameters (wte counted once).
  int64_t num_params() const override { return num_params_; }

  // The MoE layers' routing in the last forward (empty without experts).
  // ForwardBackward's gradients include each layer's load-balancing loss;
  // the loss it returns, and Loss's, are the cross-entropy alone.
  MoeStats moe_stats() const override;
  // MoE block `layer`'s routing in the last forward; null for a dense
  // block or before the first.
  const MoeRouting* moe_routing(int layer) const;

  // Training FLOPs per token at the full context, PaLM's estimate (Chowdhery
  // et al. 2022, appendix B): 6 * N + 12 * layers * width * context, where N
  // excludes the position embeddings (a lookup, no multiplies) and the
  // second term is the attention score and value products (counting the
  // masked half, as PaLM does). N counts a token's top_k experts of an MoE
  // layer, not the idle ones.
  double flops_per_token() const override;

  std::string device() const override { return "cpu"; }
  // 0: the CPU's peak is not known.
  double peak_flops() const override { return 0; }

 private:
  struct Workspace;
  explicit Gpt(const GptConfig& config);

  void BuildParams();
  // Forward through the blocks and the final LayerNorm into workspace,
  // each group of parameters waited for (param_wait_) before its use.
  absl::Status ForwardTrunk(const int32_t* tokens, int B, int T);
  // Calls param_wait_ for parameters [first, first + count), if set.
  absl::Status AwaitParams(int first, int count);
  // The CPU block backend (model/cpu_block_ops.h) for `layer`.
  CpuBlockOps LayerOps(int layer, int B, int T);
  // An MoE block's layer and tensors in `ops`.
  void AddMoeOps(int layer, CpuBlockOps& ops);
  // `recompute`: backward's second forward of the block, which waits for
  // nothing.
  absl::Status BlockForward(int layer, int B, int T, bool recompute = false);
  // The routed experts of MoE layer `layer` named (params_wanted_) and
  // waited for (param_wait_).
  absl::Status AwaitExperts(int layer, const MoeRouting& routing);
  absl::Status BlockBackward(int layer, int B, int T);
  // LM head and loss over chunks of positions; with backward, also writes
  // dL/d(lnf output) and adds to the wte gradient.
  float HeadLoss(const int32_t* targets, int N, bool backward);
  void GradReady(int param_index);
  const float* P(int layer, int slot) const;
  float* G(int layer, int slot);

  GptConfig config_;
  std::vector<ParamInfo> params_;
  std::vector<int64_t> offsets_;  // of each parameter in values_/grads_
  // Each block's first parameter index; [layers]: the final LayerNorm's.
  std::vector<int> first_param_;
  int64_t padded_floats_ = 0;  // in values_, and in grads_
  // Weights and gradients, in owned_ or in the caller's (UseStorage).
  std::vector<float> owned_;
  std::shared_ptr<const void> storage_owner_;
  float* values_ = nullptr;
  float* grads_ = nullptr;
  int64_t num_params_ = 0;
  std::function<void(int)> grad_ready_;
  std::function<absl::Status(int)> param_wait_;
  std::function<void(absl::Span<const int>)> params_wanted_;
  std::vector<int> wanted_;  // AwaitExperts' scratch
  Communicator* expert_group_ = nullptr;
  int64_t loss_tokens_ = 0;
  std::unique_ptr<Workspace> ws_;
};

}  // namespace strata

#endif  // STRATA_MODEL_GPT_H_
