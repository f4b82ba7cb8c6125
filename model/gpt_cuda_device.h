// GptCuda's device state (private to model/gpt_cuda*.cc): device buffers,
// the activations of each block, the flat weight and gradient layout, and
// the streams. Built only with STRATA_CUDA.
#ifndef STRATA_MODEL_GPT_CUDA_DEVICE_H_
#define STRATA_MODEL_GPT_CUDA_DEVICE_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda_ops.h"
#include "model/gpt_cuda.h"
#include "model/gpt_cuda_profile.h"
#include "model/gpt_layout.h"
#include "model/moe_router.h"
#include "optim/optimizer.h"

namespace strata::gpt_cuda {

namespace kc = ::strata::kernels::cuda;
using kc::bf16;

using kc::CublasStatus;
using kc::CudaStatus;

// One device allocation that only grows; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  DeviceBuffer(const DeviceBuffer&) = delete;

  // Makes room for `bytes`; the contents are lost when it grows.
  absl::Status Reserve(int64_t bytes);
  // Frees the memory.
  void Release();
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// Activations of one block for a (B,T) batch; N = B*T. bf16 unless noted.
struct BlockActs {
  DeviceBuffer ln1, ln1_mean, ln1_rstd;  // (N,C), (N) fp32, (N) fp32
  DeviceBuffer qkv;                      // (N,3C)
  DeviceBuffer att;                      // kc::AttentionSavedBytes
  DeviceBuffer atty;                     // (N,C) attention output
  DeviceBuffer res2;                     // (N,C) x + attention branch
  DeviceBuffer ln2, ln2_mean, ln2_rstd;  // (N,C), (N) fp32, (N) fp32
  DeviceBuffer fch, fch_gelu;            // (N,4C)
};

// One MoE layer's routing and its experts' activations for a (B,T) batch
// (model/gpt_cuda_moe.cc). The router runs on the host (MoeRouter); the
// R <= N·K rows the experts run over are packed expert by expert, and
// first_row[e] is expert e's first (first_row[E] = R). bf16 unless noted.
// The routing is kept per layer (ParamUnused and moe_stats read it after
// the pass); the rows' activations, as BlockActs, per layer or one
// (recompute).
struct MoeActs {
  std::optional<MoeRouter> router;
  std::vector<int> first_row;               // (E+1)
  std::vector<int32_t> host_src, host_row;  // staging for src and row
  DeviceBuffer src;                         // (N·K) int32: each row's token
  DeviceBuffer row, gate;                   // (N,K) int32, fp32: each choice's
};
struct MoeRows {
  DeviceBuffer in, y;      // (N·K,C) the rows, their outputs
  DeviceBuffer pre, post;  // (N·K,hidden) fc before and after GELU
};

// What every MoE layer's backward shares (one at a time).
struct MoeScratch {
  DeviceBuffer logits;   // (N,E) fp32 router logits
  DeviceBuffer dlogit;   // (N,E) their gradient
  DeviceBuffer dgate;    // (N,K) fp32
  DeviceBuffer dy, din;  // (N·K,C)
  DeviceBuffer dpost;    // (N·K,hidden)
  std::vector<float> host_dgate, host_dlogit;
  std::vector<bf16> host_dlogit_bf16;
};

}  // namespace strata::gpt_cuda

namespace strata {

// Everything on the device: weights, gradients, activations, the streams.
// Three streams: the context's (compute), `up` (the weights' uploads and
// their rounding to bf16, so a group's copy runs beside the compute of the
// groups before it) and `down` (gradients to the host, beside the backward
// of earlier layers). Work handed from one to another is ordered with
// Order; the host waits on `copied` and on the compute stream.
// The flat parameter layout is the host Gpt's (same order, same padding
// between parameters) except that wte has vocab_padded rows
// (gpt_layout::PaddedVocab), zero beyond the vocabulary, and everything after
// it is shifted by the same amount. Each step's weights go up a group of
// parameters at a time as the trainer's pulls land (UploadParams) and each
// gradient comes back on its own; resident training moves the whole buffer
// at its start and end (ToDevice, ToHost).
struct GptCuda::Device {
  using DeviceBuffer = gpt_cuda::DeviceBuffer;
  using bf16 = gpt_cuda::bf16;

  std::unique_ptr<kernels::cuda::Context> ctx;
  cudaStream_t up = nullptr, down = nullptr;
  cudaEvent_t handoff = nullptr;                   // Order's event
  std::unique_ptr<gpt_cuda::OpProfiler> profiler;  // with Options::profile
  int vocab = 0, vocab_padded = 0, width = 0;
  std::vector<int64_t> host_offsets;  // of each parameter in the host layout
  int64_t host_total = 0;             // floats in the host layout
  std::vector<int64_t> offsets;       // of each parameter on the device
  int64_t total = 0;                  // floats in the device layout
  int64_t head_chunk_floats = 0;      // Options::head_chunk_floats
  DeviceBuffer master;                // (total) fp32 weights
  DeviceBuffer weights;               // (total) bf16
  DeviceBuffer grads;                 // (total) fp32
  std::vector<cudaEvent_t> copied;    // per parameter: gradient is on the host
  std::vector<int> ready_order;       // parameters in the order they finished
  std::vector<void*> registered;  // host ranges pinned with cudaHostRegister

  // Resident training (GptCuda::StartResident): master is authoritative,
  // the Adam moments live beside it, and gradients stay on the device.
  bool resident = false;
  // The optimizer settings without and with weight decay, and the spans
  // of the device layout that take each (kernels::cuda::AdamUpdateSpans):
  // spans + 1 int64 starts, then spans uint8 kinds.
  OptimizerParams adam_opt[2];
  DeviceBuffer adam_spans;
  int num_spans = 0;
  DeviceBuffer adam_m, adam_v;  // (total) fp32

  int B = 0, T = 0;
  DeviceBuffer tokens, targets;  // (N) int32
  DeviceBuffer x;                // (L+1,N,C): block inputs, then the output
  std::vector<gpt_cuda::BlockActs> blocks;  // per layer, or one (recompute)
  // Per layer, an MoE layer's routing (empty for a dense one); as blocks,
  // its experts' rows.
  std::vector<gpt_cuda::MoeActs> moe;
  std::vector<gpt_cuda::MoeRows> moe_rows;
  gpt_cuda::MoeScratch moe_scratch;
  DeviceBuffer branch;  // (N,C) a branch's output before its add
  DeviceBuffer lnf, lnf_mean, lnf_rstd;  // (N,C), (N) fp32, (N) fp32
  DeviceBuffer logits;                   // (HeadRows,vocab_padded) fp32
  DeviceBuffer dlogits;                  // (HeadRows,vocab_padded)
  DeviceBuffer losses;                   // (N) fp32
  DeviceBuffer dres, dln;                // (N,C) residual gradient, scratch
  DeviceBuffer dqkv;                     // (N,3C)
  DeviceBuffer dfch;                     // (N,4C)
  kernels::cuda::AttentionKind attention = kernels::cuda::AttentionKind::kFused;
  DeviceBuffer att_scratch;  // kernels::cuda::AttentionScratchBytes
  std::vector<float> host_losses;

  ~Device();

  bf16* W(int param) const { return weights.as<bf16>() + offsets[param]; }
  float* G(int param) const { return grads.as<float>() + offsets[param]; }
  // Each block's first parameter, [layers]: the final LayerNorm's (as
  // Gpt::first_param: an MoE block has more parameters than a dense one).
  std::vector<int> first_param;
  int Block(int layer, int slot) const { return first_param[layer] + slot; }
  // Rows of logits the LM head computes at once: a power of two (so the
  // chunks of B*T rows are equal when T is a power of two), at most N.
  int HeadRows(int N) const {
    const int64_t fit = std::max<int64_t>(head_chunk_floats / vocab_padded, 1);
    return static_cast<int>(
        std::min<int64_t>(std::bit_floor(static_cast<uint64_t>(fit)), N));
  }

  // Pins [host, host + floats): the host model's weights and gradients, one
  // range (two would share a page, which a driver refuses to register
  // twice). INTERNAL when CUDA refuses; nothing is pinned then.
  absl::Status PinHostBuffers(float* host, int64_t floats);
  // Creates the streams and events. Called once, by GptCuda::Create.
  absl::Status CreateStreams(int num_params);
  // Work queued on `after` from now on runs after all work queued on
  // `before` so far.
  absl::Status Order(cudaStream_t before, cudaStream_t after) const;
  // Waits for all three streams.
  absl::Status Synchronize() const;

  // Enqueues the copy of a whole flat buffer between the host layout (e.g.
  // param_data(0)) and the device layout; the device's padding rows of wte
  // are left as they are.
  absl::Status ToDevice(float* device, const float* host) const {
    return Copy(device, host, 0, static_cast<int>(offsets.size()),
                cudaMemcpyHostToDevice);
  }
  absl::Status ToHost(float* host, const float* device) const {
    return Copy(host, device, 0, static_cast<int>(offsets.size()),
                cudaMemcpyDeviceToHost);
  }
  // Enqueues, on `up`, the copy of parameters [first, end) of the host
  // layout (with the padding between them) into `master`, and their
  // rounding into `weights` (with wte's padding rows when first is 0).
  absl::Status UploadParams(const float* host, int first, int end) const;
  // All of these: parameters [first, end) from src's layout to dst's, by
  // direction, on `stream` (the compute stream when null).
  absl::Status Copy(float* dst, const float* src, int first, int end,
                    cudaMemcpyKind kind, cudaStream_t stream = nullptr) const;

  // Sizes the activations for a (b, t) batch; a no-op for the current one.
  absl::Status Resize(const GptConfig& cfg, int b, int t);
  // Resize's part for the MoE layers: their routers and buffers.
  absl::Status ResizeMoe(const GptConfig& cfg, int b, int t);
};

}  // namespace strata

#endif  // STRATA_MODEL_GPT_CUDA_DEVICE_H_
