#include "model/gpt_cuda_device.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/gpt_cuda_convert.h"

namespace strata {
namespace gpt_cuda {

absl::Status DeviceBuffer::Reserve(int64_t bytes) {
  if (bytes <= bytes_) return absl::OkStatus();
  Release();
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&ptr_, bytes), "cudaMalloc"));
  bytes_ = bytes;
  return absl::OkStatus();
}

void DeviceBuffer::Release() {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace gpt_cuda

using gpt_cuda::CudaStatus;
using gpt_cuda::kc::bf16;

GptCuda::Device::~Device() {
  // Create may have stopped early: any of these may be null.
  if (ctx != nullptr) Synchronize().IgnoreError();
  for (cudaEvent_t e : copied) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (handoff != nullptr) cudaEventDestroy(handoff);
  for (cudaStream_t s : {up, down}) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
  for (void* p : registered) cudaHostUnregister(p);
}

absl::Status GptCuda::Device::PinHostBuffers(float* host, int64_t floats) {
  const cudaError_t e = cudaHostRegister(host, static_cast<size_t>(floats) * 4,
                                         cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it
    return CudaStatus(e, "cudaHostRegister (the model's host buffers)");
  }
  registered.push_back(host);
  return absl::OkStatus();
}

absl::Status GptCuda::Device::CreateStreams(int num_params) {
  for (cudaStream_t* s : {&up, &down}) {
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(s), "cudaStreamCreate"));
  }
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&handoff, cudaEventDisableTiming),
                 "cudaEventCreate"));
  copied.resize(num_params, nullptr);
  for (cudaEvent_t& e : copied) {
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                   "cudaEventCreate"));
  }
  return absl::OkStatus();
}

// One event serves every hand-off: a wait holds the record it was queued
// after, so recording the event again does not move earlier waits.
absl::Status GptCuda::Device::Order(cudaStream_t before,
                                    cudaStream_t after) const {
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaEventRecord(handoff, before), "cudaEventRecord"));
  return CudaStatus(cudaStreamWaitEvent(after, handoff, 0),
                    "cudaStreamWaitEvent");
}

absl::Status GptCuda::Device::Synchronize() const {
  absl::Status status = ctx->Synchronize();
  for (cudaStream_t s : {up, down}) {
    if (s == nullptr) continue;
    absl::Status st =
        CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    if (status.ok()) status = st;
  }
  return status;
}

absl::Status GptCuda::Device::UploadParams(const float* host, int first,
                                           int end) const {
  STRATA_RETURN_IF_ERROR(
      Copy(master.as<float>(), host, first, end, cudaMemcpyHostToDevice, up));
  const int n = static_cast<int>(offsets.size());
  const int64_t begin = first == 0 ? 0 : offsets[first];
  const int64_t stop = end < n ? offsets[end] : total;
  return gpt_cuda::FloatToBf16(up, weights.as<bf16>() + begin,
                               master.as<float>() + begin, stop - begin);
}

absl::Status GptCuda::Device::Resize(const GptConfig& cfg, int b, int t) {
  if (b == B && t == T) return absl::OkStatus();
  const int64_t N = int64_t{b} * t, C = cfg.width, bf = sizeof(bf16), f = 4;
  attention = kernels::cuda::ChooseAttention(*ctx, b, t, cfg.width, cfg.heads);
  const int64_t att =
      kernels::cuda::AttentionSavedBytes(attention, b, t, cfg.width, cfg.heads);
  blocks.resize(cfg.recompute ? 1 : cfg.layers);
  for (size_t i = 0; i < blocks.size(); ++i) {
    gpt_cuda::BlockActs& a = blocks[i];
    for (DeviceBuffer* d : {&a.ln1, &a.atty, &a.res2, &a.ln2}) {
      STRATA_RETURN_IF_ERROR(d->Reserve(N * C * bf));
    }
    for (DeviceBuffer* d :
         {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) {
      STRATA_RETURN_IF_ERROR(d->Reserve(N * f));
    }
    STRATA_RETURN_IF_ERROR(a.qkv.Reserve(N * 3 * C * bf));
    STRATA_RETURN_IF_ERROR(a.att.Reserve(att));
    // An MoE layer's MLP is its experts' (MoeActs).
    if (cfg.recompute || !cfg.IsMoeLayer(static_cast<int>(i))) {
      STRATA_RETURN_IF_ERROR(a.fch.Reserve(N * 4 * C * bf));
      STRATA_RETURN_IF_ERROR(a.fch_gelu.Reserve(N * 4 * C * bf));
    }
  }
  STRATA_RETURN_IF_ERROR(ResizeMoe(cfg, b, t));
  const int64_t rows = HeadRows(static_cast<int>(N));
  const std::pair<DeviceBuffer*, int64_t> sizes[] = {
      {&tokens, N * 4},
      {&targets, N * 4},
      {&x, (cfg.layers + 1) * N * C * bf},
      {&branch, N * C * bf},
      {&lnf, N * C * bf},
      {&lnf_mean, N * f},
      {&lnf_rstd, N * f},
      {&logits, rows * vocab_padded * f},
      {&dlogits, rows * vocab_padded * bf},
      {&losses, N * f},
      {&dres, N * C * bf},
      {&dln, N * C * bf},
      {&dqkv, N * 3 * C * bf},
      {&dfch, N * 4 * C * bf},
      {&att_scratch, kernels::cuda::AttentionScratchBytes(
                         attention, b, t, cfg.width, cfg.heads)},
  };
  for (const auto& [buffer, bytes] : sizes) {
    STRATA_RETURN_IF_ERROR(buffer->Reserve(bytes));
  }
  host_losses.resize(N);
  B = b;
  T = t;
  return absl::OkStatus();
}

// Buffers only grow (as Reserve's); the routers are made for N tokens.
absl::Status GptCuda::Device::ResizeMoe(const GptConfig& cfg, int b, int t) {
  if (cfg.experts == 0) return absl::OkStatus();
  const MoeDims dims = MoeLayerDims(cfg, b * t);
  // GptConfig::Validate checked the settings.
  STRATA_RETURN_IF_ERROR(ValidateMoeDims(dims));
  const int64_t N = dims.N, C = dims.C, H = dims.hidden, E = dims.experts;
  const int64_t NK = N * dims.top_k, bf = sizeof(bf16);
  moe.resize(cfg.layers);
  for (int l = 0; l < cfg.layers; ++l) {
    if (!cfg.IsMoeLayer(l)) continue;
    gpt_cuda::MoeActs& m = moe[l];
    m.router.emplace(dims);
    for (DeviceBuffer* d : {&m.src, &m.row, &m.gate}) {
      STRATA_RETURN_IF_ERROR(d->Reserve(NK * 4));
    }
  }
  moe_rows.resize(cfg.recompute ? 1 : cfg.layers);
  for (size_t i = 0; i < moe_rows.size(); ++i) {
    if (!cfg.recompute && !cfg.IsMoeLayer(static_cast<int>(i))) continue;
    gpt_cuda::MoeRows& m = moe_rows[i];
    for (DeviceBuffer* d : {&m.in, &m.y}) {
      STRATA_RETURN_IF_ERROR(d->Reserve(NK * C * bf));
    }
    for (DeviceBuffer* d : {&m.pre, &m.post}) {
      STRATA_RETURN_IF_ERROR(d->Reserve(NK * H * bf));
    }
  }
  gpt_cuda::MoeScratch& s = moe_scratch;
  const std::pair<DeviceBuffer*, int64_t> sizes[] = {
      {&s.logits, N * E * 4}, {&s.dlogit, N * E * bf}, {&s.dgate, NK * 4},
      {&s.dy, NK * C * bf},   {&s.din, NK * C * bf},   {&s.dpost, NK * H * bf},
  };
  for (const auto& [buffer, bytes] : sizes) {
    STRATA_RETURN_IF_ERROR(buffer->Reserve(bytes));
  }
  s.host_dgate.resize(NK);
  s.host_dlogit.resize(N * E);
  s.host_dlogit_bf16.resize(N * E);
  return absl::OkStatus();
}

// At most two pieces: wte's vocab rows (when first is 0), then the
// parameters from max(first, 1) to end (at host_offsets[i] on the host,
// offsets[i] on the device, contiguous in both from wpe on).
absl::Status GptCuda::Device::Copy(float* dst, const float* src, int first,
                                   int end, cudaMemcpyKind kind,
                                   cudaStream_t stream) const {
  const bool to_device = kind == cudaMemcpyHostToDevice;
  const char* what = to_device ? "copy to device" : "copy to host";
  const cudaStream_t s = stream != nullptr ? stream : ctx->stream();
  if (first == 0 && end > 0) {
    STRATA_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(dst, src, int64_t{vocab} * width * 4, kind, s), what));
    first = 1;
  }
  if (first >= end) return absl::OkStatus();
  const int n = static_cast<int>(host_offsets.size());
  const int64_t host_end = end < n ? host_offsets[end] : host_total;
  const int64_t src_at = to_device ? host_offsets[first] : offsets[first];
  const int64_t dst_at = to_device ? offsets[first] : host_offsets[first];
  return CudaStatus(
      cudaMemcpyAsync(dst + dst_at, src + src_at,
                      (host_end - host_offsets[first]) * 4, kind, s),
      what);
}

double CudaPeakBf16Flops(const std::string& name) {
  // Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's datasheets.
  if (absl::StrContains(name, "H100") || absl::StrContains(name, "H200")) {
    if (absl::StrContains(name, "PCIe")) return 756e12;
    if (absl::StrContains(name, "NVL")) return 835e12;
    return 989e12;  // SXM (and GH200)
  }
  if (absl::StrContains(name, "A100")) return 312e12;
  return 0;
}

}  // namespace strata
