// The model interface the trainer drives, with a CPU implementation (Gpt,
// model/gpt.h) and, when built with CUDA, a GPU one (GptCuda,
// model/gpt_cuda.h).
//
// The contract is host fp32 buffers: the trainer pulls weights from the
// servers into param_data(i), calls ForwardBackward, and pushes
// grad_data(i). A GPU model copies the weights to the device (and converts
// them to its compute dtype) at the start of every ForwardBackward/Loss and
// copies the gradients back before it reports them ready.
#ifndef STRATA_MODEL_MODEL_H_
#define STRATA_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/chunk_plan.h"

namespace strata {

// The shape of a GPT.
struct GptConfig {
  int vocab = 256;         // token ids are in [0, vocab)
  int context = 64;        // longest sequence (rows of the position table)
  int layers = 2;          // transformer blocks
  int heads = 2;           // attention heads; must divide width
  int width = 64;          // channels C
  bool recompute = false;  // keep only block inputs; recompute in backward
  // Mixture of experts (model/moe_layer.h): with experts > 0, blocks
  // moe_every - 1, 2 * moe_every - 1, ... have an MoE feed-forward layer
  // of `experts` MLPs of expert_hidden features each (0: 4 x width, the
  // dense MLP's) in place of their MLP, top_k of them a token, `capacity`
  // the capacity factor, `aux_loss` the weight of the load-balancing
  // loss. Every model runs them.
  int experts = 0;
  int top_k = 2;
  int moe_every = 2;
  int expert_hidden = 0;
  float capacity = 1.25f;
  float aux_loss = 0.01f;
  bool IsMoeLayer(int layer) const {
    return experts > 0 && (layer + 1) % moe_every == 0;
  }
  int ExpertHidden() const {
    return expert_hidden > 0 ? expert_hidden : 4 * width;
  }

  // INVALID_ARGUMENT unless every size is positive, heads divides width,
  // vocab <= 65536 (tokens are stored as uint16 in shards), and, with
  // experts > 0: experts <= 1024, top_k 1 or 2 and <= experts, moe_every
  // in [1, layers], expert_hidden in [0, 2^20], capacity > 0 and
  // aux_loss >= 0.
  absl::Status Validate() const;
};

// One parameter tensor: its spec (name, shape, optimizer group: "decay" for
// matrices, "no_decay" for biases, LayerNorm and position embeddings) and
// how InitParams fills it.
struct ParamInfo {
  TensorSpec spec;
  enum Init { kNormal, kZeros, kOnes } init = kZeros;
  float init_scale = 0;  // standard deviation for kNormal
};

// What the MoE layers of the last forward routed (model/moe_layer.h).
struct MoeStats {
  double aux_loss = 0;                 // summed over the layers
  int64_t dropped = 0;                 // assignments over capacity, all layers
  int64_t assignments = 0;             // tokens x top_k, all layers
  std::vector<std::vector<int>> load;  // per MoE layer, per expert
};

// How one worker splits its model: tp x pp ranks (model/gpt_parallel.h),
// or ep expert-parallel ranks (model/gpt_expert_parallel.h).
struct ModelParallelism {
  int tp = 1;  // tensor-parallel ranks per stage
  int pp = 1;  // pipeline stages (<= layers)
  // Micro-batches per ForwardBackward in the pipeline (clamped to the
  // batch's rows; sizes as equal as can be).
  int micro_batches = 1;
  int ep = 1;  // expert-parallel ranks (an MoE model; tp = pp = 1)
};

// A GPT (see GptConfig) on some device. Not thread-safe: one call at a time.
class Model {
 public:
  virtual ~Model() = default;

  virtual const GptConfig& config() const = 0;

  // The parameter tensors in forward order (names, shapes, optimizer
  // groups, init); identical for every implementation of the same config.
  virtual const std::vector<ParamInfo>& params() const = 0;

  // Parameter i's values and gradient on the host: spec.numel() fp32 values
  // each, owned by the model, valid for its lifetime.
  // REQUIRES: 0 <= i < params().size().
  virtual float* param_data(int i) = 0;
  virtual float* grad_data(int i) = 0;

  // Forward and backward on a batch of (B,T) int32 tokens and targets
  // (row-major, host memory), with the weights now in param_data. Returns
  // the mean cross-entropy and leaves its gradient in grad_data
  // (overwriting, or adding to what is there when accumulate).
  // INVALID_ARGUMENT if B < 1, T < 1, T > context, or a token or target is
  // outside [0, vocab); a device error is returned as INTERNAL (the
  // gradients are then unspecified). Implementations keep the default
  // accumulate = false.
  virtual absl::StatusOr<float> ForwardBackward(const int32_t* tokens,
                                                const int32_t* targets, int B,
                                                int T,
                                                bool accumulate = false) = 0;

  // The mean cross-entropy only (gradients untouched). Errors as above.
  virtual absl::StatusOr<float> Loss(const int32_t* tokens,
                                     const int32_t* targets, int B, int T) = 0;

  // Sets a function that ForwardBackward calls on the calling thread as soon
  // as parameter i's gradient is final in grad_data(i): lnf first, then the
  // blocks from last to first, wpe and wte last. The function must not call
  // into the model; grad_data(i) stays unchanged until the next
  // ForwardBackward. Empty: no calls.
  virtual void SetGradReadyCallback(
      std::function<void(int param_index)> cb) = 0;

  // Sets a function that ForwardBackward and Loss call on the calling
  // thread before they first read parameter i from param_data(i): once per
  // parameter per call, in forward order, every call before the first
  // grad-ready call. It returns when param_data(i) holds the weights to
  // compute with (the trainer's pulls of the step land meanwhile: forward
  // starts on the first layers while later ones are in flight). A non-OK
  // status stops the pass, which returns it (the gradients are then
  // unspecified). A model that does not read the host weights (GptCuda
  // resident) makes no calls. Empty: no calls. The function must not call
  // into the model. A routed parameter (RoutedParam) is waited for only
  // if the pass reads it (after its layer's router, and after the
  // params-wanted call that names it); a recomputed forward waits for
  // nothing.
  virtual void SetParamWaitCallback(
      std::function<absl::Status(int param_index)> cb) = 0;

  // Mixture of experts (model/moe_layer.h). A routed parameter is an
  // expert's: a pass reads it only if its layer's router sends tokens to
  // that expert, and otherwise leaves its gradient at zero. False for
  // every parameter of a dense model.
  virtual bool RoutedParam(int i) const { return false; }
  // Sets a function the forward calls, on the calling thread, once a
  // layer has routed: the routed parameters it will read (each expert
  // with tokens, all of its tensors), before it waits for any of them, so
  // a trainer can send all of their pulls at once. Empty: no calls.
  virtual void SetParamsWantedCallback(
      std::function<void(absl::Span<const int> params)> cb) {}
  // Whether the last pass (ForwardBackward, Loss) read routed parameter i
  // not at all: no token reached its expert, so that pass's gradient of
  // it is exactly zero. False for parameters that are not routed.
  virtual bool ParamUnused(int i) const { return false; }

  // The number of parameters (wte counted once).
  virtual int64_t num_params() const = 0;
  // The MoE layers' routing in the last forward; empty for a dense model
  // (and for backends without MoE layers).
  virtual MoeStats moe_stats() const { return {}; }

  // Training FLOPs per token at the full context (Gpt::flops_per_token).
  virtual double flops_per_token() const = 0;

  // Where the model computes: "cpu" or "cuda:<ordinal>".
  virtual std::string device() const = 0;

  // The device's dense bf16 peak in FLOP/s, for MFU; 0 when unknown (and
  // always on the CPU).
  virtual double peak_flops() const = 0;

  // Floats of the storage UseStorage takes (the parameters, then their
  // gradients, each padded to 64 bytes); 0 where the model keeps its
  // buffers where they are (a model split over ranks).
  virtual int64_t storage_floats() const { return 0; }
  // Moves param_data and grad_data, values kept, into
  // storage[0, storage_floats()): memory aligned to 64 bytes that `owner`
  // keeps alive, such as a shared-memory region the servers on this host
  // write pulls into and copy pushes out of (PsClient::ShareTensors).
  // Pointers taken before are no longer the model's. On an error nothing
  // moved. UNIMPLEMENTED where storage_floats() is 0.
  virtual absl::Status UseStorage(float* storage,
                                  std::shared_ptr<const void> owner) {
    return absl::UnimplementedError("this model keeps its buffers");
  }
};

// The batch checks every Model does before computing: INVALID_ARGUMENT if
// B < 1, T < 1, T > config.context, or a token or target (either may be
// null: not checked) is outside [0, config.vocab). tokens and targets are
// (B,T) host arrays.
absl::Status ValidateBatch(const GptConfig& config, const int32_t* tokens,
                           const int32_t* targets, int B, int T);

// Where a model computes (`--device`).
enum class Device { kCpu, kCuda };

// "cpu" or "cuda" as a Device; INVALID_ARGUMENT for any other name.
absl::StatusOr<Device> ParseDevice(absl::string_view name);
// The name ParseDevice takes: "cpu" or "cuda".
const char* DeviceName(Device device);

// Builds a model with zeroed parameters on `device`: the CPU (Gpt,
// ParallelGpt when `parallelism` has more than one tp or pp rank,
// ExpertParallelGpt with ep > 1) or CUDA (GptCuda on device 0).
// INVALID_ARGUMENT for a bad config or a bad split; UNAVAILABLE for CUDA
// when Strata was built without CUDA or no CUDA device is present;
// UNIMPLEMENTED for CUDA with more than one rank (the splits run on CPU
// threads only) and for ep > 1 with tp or pp > 1 (not built).
absl::StatusOr<std::unique_ptr<Model>> CreateModel(
    const GptConfig& config, Device device, ModelParallelism parallelism = {});

}  // namespace strata

#endif  // STRATA_MODEL_MODEL_H_
