// The GPT of model/gpt.h on a CUDA device: bf16 weights and
// activations, fp32 accumulation and fp32 gradients, through the kernels of
// kernels/cuda_ops.h. Built only with STRATA_CUDA.
//
// Host fp32 buffers stay the contract (model/model.h): the servers hold the
// fp32 master weights, the trainer pulls them into param_data(), and every
// ForwardBackward/Loss copies them to the device and rounds them to bf16
// there, so the device never holds a stale copy. Gradients are computed in
// fp32 on the device and copied back into grad_data() parameter by
// parameter, in backward order, as soon as each is final.
//
// Same parameters (list, order, names, groups, init) and the same math as
// the CPU Gpt: the host side *is* a CPU Gpt, whose buffers this model uses.
#ifndef STRATA_MODEL_GPT_CUDA_H_
#define STRATA_MODEL_GPT_CUDA_H_

#include <cuda_bf16.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/gpt.h"
#include "model/model.h"
#include "optim/optimizer.h"

namespace strata {

// A GPT on one CUDA device. Not thread-safe: one call at a time (from any
// thread; each call selects its device).
class GptCuda : public Model {
 public:
  // How the model runs on its device; the defaults suit GPT-2 shapes.
  struct Options {
    int ordinal = 0;  // the CUDA device
    // The LM head computes its logits (fp32) and their gradients (bf16) for
    // at most this many floats at a time: rows of the padded vocabulary,
    // rounded down to a power of two (1024 rows for GPT-2's at the default
    // 2^26: 300 MB). Smaller chunks save memory; larger ones re-read the
    // head's fp32 weight gradient fewer times (once per chunk).
    int64_t head_chunk_floats = int64_t{1} << 26;
    // Times each op class with CUDA events (TakeProfile). Costs two event
    // records per op.
    bool profile = false;
  };

  // Builds a model with zeroed parameters on CUDA device `ordinal`.
  // INVALID_ARGUMENT for a bad config, ordinal or option; UNAVAILABLE when
  // there is no CUDA device; INTERNAL for other CUDA/cuBLAS errors.
  static absl::StatusOr<std::unique_ptr<GptCuda>> Create(
      const GptConfig& config, int ordinal = 0);
  static absl::StatusOr<std::unique_ptr<GptCuda>> Create(
      const GptConfig& config, const Options& options);

  ~GptCuda() override;
  GptCuda(const GptCuda&) = delete;
  GptCuda& operator=(const GptCuda&) = delete;

  const GptConfig& config() const override { return host_->config(); }
  const std::vector<ParamInfo>& params() const override {
    return host_->params();
  }
  // Host fp32 buffers, as Gpt's (they are the host Gpt's).
  float* param_data(int i) override { return host_->param_data(i); }
  float* grad_data(int i) override { return host_->grad_data(i); }
  // Model's storage contract, for the host buffers: the storage is pinned
  // (cudaHostRegister) before they move, and a failure to pin it is an
  // error that leaves them where they were (unpinned, every copy would
  // stop the compute). INVALID_ARGUMENT for unaligned storage; INTERNAL
  // for a CUDA error.
  int64_t storage_floats() const override { return host_->storage_floats(); }
  absl::Status UseStorage(float* storage,
                          std::shared_ptr<const void> owner) override;

  // As Gpt::InitParams (the same values for the same seed), on the host.
  void InitParams(uint64_t seed) { host_->InitParams(seed); }

  // Model's contract (model/model.h); on the device: copies param_data
  // there (rounding to bf16) and each parameter's fp32 gradient back to
  // grad_data(i). The grad-ready callback runs on the calling thread after
  // parameter i's copy has completed, in the CPU model's order, while the
  // device goes on with earlier layers (the copies run on a stream of their
  // own; the host buffers are pinned with cudaHostRegister when the system
  // allows; unpinned, copies and compute serialize). Returns when every copy
  // is done. INTERNAL for a CUDA or cuBLAS error.
  absl::StatusOr<float> ForwardBackward(const int32_t* tokens,
                                        const int32_t* targets, int B, int T,
                                        bool accumulate = false) override;
  absl::StatusOr<float> Loss(const int32_t* tokens, const int32_t* targets,
                             int B, int T) override;
  void SetGradReadyCallback(std::function<void(int param_index)> cb) override;
  // The weights go up group by group (wte, wpe, each block, the final
  // LayerNorm) as each group's waits return, on a copy stream of their own:
  // the device computes each layer as soon as its group is up, while the
  // pulls and copies of later groups go on.
  void SetParamWaitCallback(
      std::function<absl::Status(int param_index)> cb) override;
  // An MoE block (model/gpt_cuda_moe.cc) routes on the host, as Gpt does:
  // its router goes up with the block's attention half; once its tokens
  // are routed, only the experts with tokens are named (params-wanted),
  // waited for and uploaded.
  bool RoutedParam(int i) const override { return host_->RoutedParam(i); }
  void SetParamsWantedCallback(
      std::function<void(absl::Span<const int>)> cb) override;
  bool ParamUnused(int i) const override;
  MoeStats moe_stats() const override;
  // As Gpt::moe_routing.
  const MoeRouting* moe_routing(int layer) const;

  // Resident training, for one worker that owns its optimizer (no servers:
  // bench/gpu_train.sh, single-GPU runs). The fp32 master weights, the
  // gradients and the Adam state stay on the device and the update runs
  // there, so a step moves only the batch and the loss over PCIe.
  //  - StartResident uploads param_data as the master weights and zeroes
  //    the moments. `params` must be Adam or AdamW; weight decay applies to
  //    the "decay" group only, as the trainer configures the servers.
  //  - ResidentStep runs forward, backward and one update with 0-based
  //    index `step` (ScheduledLr(params, step), bias correction step + 1)
  //    and returns the loss. No grad-ready callbacks; grad_data untouched.
  //  - Loss works on the resident weights; ForwardBackward is
  //    FAILED_PRECONDITION until StopResident.
  //  - StopResident copies the weights back into param_data and frees the
  //    moments (a no-op when not resident).
  absl::Status StartResident(const OptimizerParams& params);
  absl::StatusOr<float> ResidentStep(const int32_t* tokens,
                                     const int32_t* targets, int B, int T,
                                     int64_t step);
  absl::Status StopResident();

  // As Gpt::Generate, computed on the CPU from the host weights in
  // param_data (sampling is latency-bound and rare; no device work).
  absl::StatusOr<std::vector<int32_t>> Generate(std::vector<int32_t> prompt,
                                                int new_tokens,
                                                float temperature,
                                                uint64_t seed) {
    return host_->Generate(std::move(prompt), new_tokens, temperature, seed);
  }

  // With Options::profile: the device time of each op class ("fwd.matmul",
  // "bwd.attention", "adam", ...) summed over the steps since the last call,
  // in ms, in the order first run; clears the sums. Empty without profile.
  std::vector<std::pair<std::string, double>> TakeProfile();

  int64_t num_params() const override { return host_->num_params(); }
  double flops_per_token() const override { return host_->flops_per_token(); }
  std::string device() const override;
  // Dense bf16 peak of the device, from its name: 989e12 for H100 SXM and
  // H200, 835e12 for their NVL parts, 756e12 for H100 PCIe, 312e12 for
  // A100; 0 for others.
  double peak_flops() const override { return peak_flops_; }

 private:
  struct Device;  // device buffers, stream, events (gpt_cuda_device.h)
  GptCuda(std::unique_ptr<Gpt> host, const Options& options);

  // Runs `enqueue` (device work for op class `name`, a string literal),
  // timed when profiling.
  absl::Status Op(const char* name, absl::FunctionRef<absl::Status()> enqueue);

  // Validates the batch, sizes the activations and enqueues the upload of
  // the batch (ForwardTrunk uploads the weights).
  absl::Status Prepare(const int32_t* tokens, const int32_t* targets, int B,
                       int T);
  // Waits for parameters [first, end) (param_wait_) and enqueues their
  // upload from param_data and rounding to bf16 on the upload stream.
  absl::Status UploadParams(int first, int end);
  // Enqueues forward, loss and backward for a prepared batch (see
  // gpt_cuda.cc).
  absl::Status EnqueueForwardBackward(int B, int T, bool accumulate);
  absl::StatusOr<float> RunForwardBackward(const int32_t* tokens,
                                           const int32_t* targets, int B, int T,
                                           bool accumulate);
  // The enqueueing steps, as in Gpt. The block's are the transformer block
  // (model/transformer_block.h) over BlockOps (gpt_cuda_block.cc).
  struct BlockOps;
  BlockOps LayerOps(int layer, int B, int T);
  absl::Status ForwardTrunk(int B, int T);
  // `recompute`: backward's second forward of the block, which uploads
  // nothing.
  absl::Status BlockForward(int layer, int B, int T, bool recompute = false);
  absl::Status BlockBackward(int layer, int B, int T);
  // An MoE block's layer (gpt_cuda_moe.cc): out = residual + MoE(in) for
  // in = LN2's output, routing on the host, the routed experts named,
  // waited for and uploaded (not resident); `recompute`: with the
  // forward's routing and experts, which are still there. The backward writes
  // din = dL/d(in) from dout = dL/d(out) and adds the router's and the
  // experts' gradients, then reports them ready.
  using bf16 = __nv_bfloat16;
  absl::Status MoeForward(int layer, bf16* out, const bf16* residual,
                          const bf16* in, bool recompute);
  absl::Status MoeBackward(int layer, bf16* din, const bf16* dout,
                           const bf16* in);
  // MoeForward's parts: the routing (logits on the device, MoeRouter on
  // the host, the packed rows back up), then the experts with tokens.
  absl::Status MoeRoute(int layer, const bf16* in);
  absl::Status FetchExperts(int layer);
  absl::Status RunExperts(int layer);
  absl::Status ExpertsBackward(int layer);
  absl::Status HeadLoss(int N, bool backward);
  // Enqueues the copy of parameter i's final gradient to grad_data(i).
  absl::Status GradReady(int param_index);
  // Waits for the device and returns the mean of HeadLoss's N losses.
  absl::StatusOr<float> FetchMeanLoss(int N);

  std::unique_ptr<Gpt> host_;
  Options options_;
  int ordinal_;
  double peak_flops_ = 0;
  std::function<void(int)> grad_ready_;
  std::function<absl::Status(int)> param_wait_;
  std::function<void(absl::Span<const int>)> params_wanted_;
  std::vector<int> wanted_;  // FetchExperts' scratch
  // After host_, so destroyed first: ~Device unpins the host buffers while
  // host_ (and the storage it may have been given) still holds them.
  std::unique_ptr<Device> dev_;
};

// The dense bf16 peak FLOP/s of a device with this name (as
// cudaDeviceProp::name), 0 if not known. Exposed for tests.
double CudaPeakBf16Flops(const std::string& device_name);

}  // namespace strata

#endif  // STRATA_MODEL_GPT_CUDA_H_
