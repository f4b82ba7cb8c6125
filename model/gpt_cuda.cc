#include "model/gpt_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda_ops.h"
#include "model/gpt_cuda_convert.h"
#include "model/gpt_cuda_device.h"
#include "model/gpt_layout.h"
#include "spdlog/spdlog.h"

namespace strata {
namespace {

namespace kc = ::strata::kernels::cuda;
using gpt_cuda::CublasStatus;
using gpt_cuda::CudaStatus;
using kc::bf16;

using namespace ::strata::gpt_layout;  // NOLINT: the shared parameter layout

}  // namespace

GptCuda::GptCuda(std::unique_ptr<Gpt> host, const Options& options)
    : host_(std::move(host)),
      options_(options),
      ordinal_(options.ordinal),
      dev_(std::make_unique<Device>()) {}

GptCuda::~GptCuda() = default;

absl::StatusOr<std::unique_ptr<GptCuda>> GptCuda::Create(
    const GptConfig& config, int ordinal) {
  Options options;
  options.ordinal = ordinal;
  return Create(config, options);
}

absl::StatusOr<std::unique_ptr<GptCuda>> GptCuda::Create(
    const GptConfig& config, const Options& options) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> host, Gpt::Create(config));
  if (options.head_chunk_floats < 1) {
    return absl::InvalidArgumentError("head_chunk_floats must be >= 1");
  }
  const int count = kc::DeviceCount();
  if (count == 0) {
    return absl::UnavailableError(
        "device \"cuda\": no CUDA device is present (or no driver)");
  }
  const int ordinal = options.ordinal;
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", ordinal, " does not exist (", count, " present)"));
  }
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  std::unique_ptr<GptCuda> m(new GptCuda(std::move(host), options));
  cudaDeviceProp prop;
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, ordinal),
                                    "cudaGetDeviceProperties"));
  m->peak_flops_ = CudaPeakBf16Flops(prop.name);

  Device& d = *m->dev_;
  STRATA_ASSIGN_OR_RETURN(d.ctx, kc::Context::Create());
  if (options.profile) {
    d.profiler = std::make_unique<gpt_cuda::OpProfiler>(d.ctx->stream());
  }
  for (int l = 0; l <= config.layers; ++l) {
    d.first_param.push_back(m->host_->first_param(l));
  }
  d.vocab = config.vocab;
  d.vocab_padded = PaddedVocab(config.vocab);
  d.width = config.width;
  d.head_chunk_floats = options.head_chunk_floats;
  const int n = static_cast<int>(m->params().size());
  const float* base = m->param_data(0);
  for (int i = 0; i < n; ++i) d.host_offsets.push_back(m->param_data(i) - base);
  d.host_total = d.host_offsets.back() +
                 static_cast<int64_t>(m->params().back().spec.numel());
  // wte grows by the padding rows; the shift keeps every later parameter
  // as aligned as on the host (whose padding is 16 floats).
  const int64_t shift =
      (int64_t{d.vocab_padded - d.vocab} * config.width + 63) / 64 * 64;
  d.offsets = d.host_offsets;
  for (int i = 1; i < n; ++i) d.offsets[i] += shift;
  d.total = d.host_total + shift;
  STRATA_RETURN_IF_ERROR(d.master.Reserve(d.total * 4));
  STRATA_RETURN_IF_ERROR(d.weights.Reserve(d.total * sizeof(bf16)));
  STRATA_RETURN_IF_ERROR(d.grads.Reserve(d.total * 4));
  // The padding stays zero: uploads skip it, wte's group is rounded with
  // its padding rows, and their gradients are zero.
  STRATA_RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(d.master.as<float>(), 0, d.total * 4, d.ctx->stream()),
      "cudaMemsetAsync"));
  STRATA_RETURN_IF_ERROR(d.ctx->Synchronize());
  STRATA_RETURN_IF_ERROR(d.CreateStreams(n));
  // Pinned host buffers make the per-step copies asynchronous and about
  // twice as fast; without pinning (e.g. a locked-memory limit) they still
  // work, so a failure here is not an error.
  if (absl::Status s = d.PinHostBuffers(m->param_data(0), m->storage_floats());
      !s.ok()) {
    spdlog::warn(
        "CUDA: the host buffers stay unpinned (copies will stop the compute): "
        "{}",
        s.ToString());
  }
  return m;
}

absl::Status GptCuda::UseStorage(float* storage,
                                 std::shared_ptr<const void> owner) {
  if (reinterpret_cast<uintptr_t>(storage) % 64 != 0) {
    return absl::InvalidArgumentError(
        "the model's storage must be aligned to 64 bytes");
  }
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  Device& d = *dev_;
  // No copy may still read or write the buffers that move.
  STRATA_RETURN_IF_ERROR(d.Synchronize());
  const std::vector<void*> old = std::exchange(d.registered, {});
  if (absl::Status pinned = d.PinHostBuffers(storage, storage_floats());
      !pinned.ok()) {
    d.registered = old;
    return pinned;
  }
  // The old buffers are unpinned before the host model frees them; should
  // the move fail (it checks only the alignment, checked above), they are
  // pinned again and the storage is not.
  for (void* p : old) cudaHostUnregister(p);
  absl::Status moved = host_->UseStorage(storage, std::move(owner));
  if (!moved.ok()) {
    cudaHostUnregister(storage);
    d.registered.clear();
    STRATA_RETURN_IF_ERROR(d.PinHostBuffers(param_data(0), storage_floats()));
  }
  return moved;
}

absl::Status GptCuda::Op(const char* name,
                         absl::FunctionRef<absl::Status()> enqueue) {
  if (dev_->profiler == nullptr) return enqueue();
  return dev_->profiler->Time(name, enqueue);
}

std::vector<std::pair<std::string, double>> GptCuda::TakeProfile() {
  if (dev_->profiler == nullptr) return {};
  return dev_->profiler->Take();
}

std::string GptCuda::device() const { return absl::StrCat("cuda:", ordinal_); }

void GptCuda::SetGradReadyCallback(std::function<void(int)> cb) {
  grad_ready_ = std::move(cb);
}

void GptCuda::SetParamWaitCallback(std::function<absl::Status(int)> cb) {
  param_wait_ = std::move(cb);
}

// ---------------------------------------------------------------------------
// Forward and backward. N = B*T positions, C = width, NH = heads. The
// compute is enqueued on the context's stream, the weights' uploads and the
// gradients' copies on Device's `up` and `down`; the host waits only for the
// gradients (ForwardBackward) and the losses.

absl::Status GptCuda::Prepare(const int32_t* tokens, const int32_t* targets,
                              int B, int T) {
  STRATA_RETURN_IF_ERROR(ValidateBatch(config(), tokens, targets, B, T));
  if (tokens == nullptr || targets == nullptr) {
    return absl::InvalidArgumentError("tokens and targets must not be null");
  }
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  Device& d = *dev_;
  STRATA_RETURN_IF_ERROR(d.Resize(config(), B, T));
  cudaStream_t s = d.ctx->stream();
  const int64_t ids_bytes = int64_t{B} * T * 4;
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(d.tokens.as<int32_t>(), tokens, ids_bytes,
                                 cudaMemcpyHostToDevice, s),
                 "copy tokens"));
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(d.targets.as<int32_t>(), targets, ids_bytes,
                                 cudaMemcpyHostToDevice, s),
                 "copy targets"));
  // Resident, the device weights are the current ones already; otherwise
  // ForwardTrunk uploads them group by group, and the uploads must not
  // overwrite weights that earlier work on the compute stream still reads.
  if (d.resident) return absl::OkStatus();
  return d.Order(s, d.up);
}

absl::Status GptCuda::UploadParams(int first, int end) {
  Device& d = *dev_;
  if (param_wait_) {
    for (int i = first; i < end; ++i) STRATA_RETURN_IF_ERROR(param_wait_(i));
  }
  return d.UploadParams(param_data(0), first, end);
}

// Not resident, each group of weights goes up (wte, wpe, each block, the
// final LayerNorm) as its waits return, on the upload stream, and the
// compute that reads the group waits for it: the device computes the first
// layers while the trainer's pulls of later ones are in flight and their
// copies run beside it.
absl::Status GptCuda::ForwardTrunk(int B, int T) {
  Device& d = *dev_;
  kc::Context& ctx = *d.ctx;
  const int N = B * T, C = config().width, L = config().layers;
  const int n = static_cast<int>(params().size());
  const bool upload = !d.resident;
  auto upload_then_order = [&](int first, int end) -> absl::Status {
    if (!upload) return absl::OkStatus();
    STRATA_RETURN_IF_ERROR(UploadParams(first, end));
    return d.Order(d.up, ctx.stream());
  };
  if (upload) STRATA_RETURN_IF_ERROR(UploadParams(kWte, kWpe));
  STRATA_RETURN_IF_ERROR(upload_then_order(kWpe, kWpe + 1));
  STRATA_RETURN_IF_ERROR(Op("fwd.encoder", [&] {
    return kc::EncoderForward(ctx, d.x.as<bf16>(), d.tokens.as<int32_t>(),
                              d.W(kWte), d.W(kWpe), B, T, C);
  }));
  for (int l = 0; l < L; ++l) {
    // An MoE block's experts go up once routed (FetchExperts).
    const int end =
        config().IsMoeLayer(l) ? d.Block(l, kMoeRouter + 1) : d.Block(l + 1, 0);
    STRATA_RETURN_IF_ERROR(upload_then_order(d.Block(l, 0), end));
    STRATA_RETURN_IF_ERROR(BlockForward(l, B, T));
  }
  const int lnf = d.Block(L, 0);
  STRATA_RETURN_IF_ERROR(upload_then_order(lnf, n));
  return Op("fwd.layernorm", [&] {
    return kc::LayerNormForward(
        ctx, d.lnf.as<bf16>(), d.lnf_mean.as<float>(), d.lnf_rstd.as<float>(),
        d.x.as<bf16>() + int64_t{L} * N * C, d.W(lnf), d.W(lnf + 1), N, C);
  });
}

// The tied LM head and the per-position losses, in chunks of rows: logits
// (rows,Vp) fp32 = lnf (rows,C) @ wte^T over the padded vocabulary Vp, then
// the fused softmax cross-entropy over the first V columns (the padding's
// logits are 0 and ignored, its dlogits 0); with backward, also dL/d(lnf
// output) into dln and the head's part of the wte gradient (zero in the
// padding rows).
absl::Status GptCuda::HeadLoss(int N, bool backward) {
  Device& d = *dev_;
  kc::Context& ctx = *d.ctx;
  const int C = config().width, V = d.vocab, Vp = d.vocab_padded;
  const int rows = d.HeadRows(N);
  const float alpha = 1.0f, beta = 0.0f;
  for (int n0 = 0; n0 < N; n0 += rows) {
    const int nc = std::min(rows, N - n0);
    const bf16* lnf = d.lnf.as<bf16>() + int64_t{n0} * C;
    // cuBLAS is column-major: logits^T (Vp,nc) = wte (C,Vp)^T lnf^T (C,nc).
    STRATA_RETURN_IF_ERROR(Op("fwd.lm_head", [&] {
      return CublasStatus(
          cublasGemmEx(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, Vp, nc, C,
                       &alpha, d.W(kWte), CUDA_R_16BF, C, lnf, CUDA_R_16BF, C,
                       &beta, d.logits.as<float>(), CUDA_R_32F, Vp,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "LM head cublasGemmEx");
    }));
    STRATA_RETURN_IF_ERROR(Op("fwd.cross_entropy", [&] {
      return kc::SoftmaxCrossEntropyFused(
          ctx, d.dlogits.as<bf16>(), d.losses.as<float>() + n0,
          d.logits.as<float>(), d.targets.as<int32_t>() + n0, 1.0f / N, nc, V,
          Vp);
    }));
    if (!backward) continue;
    STRATA_RETURN_IF_ERROR(Op("bwd.lm_head", [&] {
      return kc::MatmulBackward(ctx, d.dln.as<bf16>() + int64_t{n0} * C,
                                d.G(kWte), nullptr, d.dlogits.as<bf16>(), lnf,
                                d.W(kWte), nc, C, Vp);
    }));
  }
  return absl::OkStatus();
}

// Enqueues the copy of parameter i's (final) gradient to grad_data(i).
absl::Status GptCuda::GradReady(int i) {
  Device& d = *dev_;
  if (d.resident) return absl::OkStatus();  // gradients stay on the device
  const int64_t bytes = static_cast<int64_t>(params()[i].spec.numel()) * 4;
  // On the download stream, so backward goes on with earlier layers.
  STRATA_RETURN_IF_ERROR(d.Order(d.ctx->stream(), d.down));
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(grad_data(i), d.G(i), bytes,
                                 cudaMemcpyDeviceToHost, d.down),
                 "copy gradient"));
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaEventRecord(d.copied[i], d.down), "cudaEventRecord"));
  d.ready_order.push_back(i);
  return absl::OkStatus();
}

absl::StatusOr<float> GptCuda::FetchMeanLoss(int N) {
  Device& d = *dev_;
  // Into pageable memory, so this also waits for the device.
  STRATA_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(d.host_losses.data(), d.losses.as<float>(),
                      int64_t{N} * 4, cudaMemcpyDeviceToHost, d.ctx->stream()),
      "copy losses"));
  STRATA_RETURN_IF_ERROR(d.ctx->Synchronize());
  if (d.profiler != nullptr) STRATA_RETURN_IF_ERROR(d.profiler->Collect());
  double total = 0;
  for (int i = 0; i < N; ++i) total += d.host_losses[i];
  return static_cast<float>(total / N);
}

// Enqueues forward, the loss and backward into zeroed (or, with
// accumulate, host-initialized) device gradients, with a GradReady per
// parameter in backward order.
absl::Status GptCuda::EnqueueForwardBackward(int B, int T, bool accumulate) {
  Device& d = *dev_;
  cudaStream_t s = d.ctx->stream();
  // The gradients are zeroed only after the last step's copies to the host
  // have read them. With accumulate, the sum starts from what the caller
  // holds in grad_data (the padding rows of wte's gradient from zero).
  STRATA_RETURN_IF_ERROR(d.Order(d.down, s));
  STRATA_RETURN_IF_ERROR(Op("zero_grads", [&] {
    return CudaStatus(cudaMemsetAsync(d.grads.as<float>(), 0, d.total * 4, s),
                      "initialize gradients");
  }));
  if (accumulate) {
    STRATA_RETURN_IF_ERROR(d.ToDevice(d.grads.as<float>(), grad_data(0)));
  }
  d.ready_order.clear();
  const int N = B * T, C = config().width, L = config().layers;
  STRATA_RETURN_IF_ERROR(ForwardTrunk(B, T));
  STRATA_RETURN_IF_ERROR(HeadLoss(N, /*backward=*/true));

  const int lnf = d.Block(L, 0);
  STRATA_RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(d.dres.as<bf16>(), 0, int64_t{N} * C * sizeof(bf16), s),
      "cudaMemsetAsync"));
  STRATA_RETURN_IF_ERROR(Op("bwd.layernorm", [&] {
    return kc::LayerNormBackward(
        *d.ctx, d.dres.as<bf16>(), d.G(lnf), d.G(lnf + 1), d.dln.as<bf16>(),
        d.x.as<bf16>() + int64_t{L} * N * C, d.W(lnf), d.lnf_mean.as<float>(),
        d.lnf_rstd.as<float>(), N, C);
  }));
  STRATA_RETURN_IF_ERROR(GradReady(lnf));
  STRATA_RETURN_IF_ERROR(GradReady(lnf + 1));
  for (int l = L - 1; l >= 0; --l) {
    if (config().recompute) {
      STRATA_RETURN_IF_ERROR(BlockForward(l, B, T, /*recompute=*/true));
    }
    STRATA_RETURN_IF_ERROR(BlockBackward(l, B, T));
  }
  STRATA_RETURN_IF_ERROR(Op("bwd.encoder", [&] {
    return kc::EncoderBackward(*d.ctx, d.G(kWte), d.G(kWpe), d.dres.as<bf16>(),
                               d.tokens.as<int32_t>(), B, T, C);
  }));
  STRATA_RETURN_IF_ERROR(GradReady(kWpe));
  return GradReady(kWte);
}

absl::StatusOr<float> GptCuda::RunForwardBackward(const int32_t* tokens,
                                                  const int32_t* targets, int B,
                                                  int T, bool accumulate) {
  STRATA_RETURN_IF_ERROR(Prepare(tokens, targets, B, T));
  STRATA_RETURN_IF_ERROR(EnqueueForwardBackward(B, T, accumulate));
  // Everything is enqueued: report each gradient as its copy lands, while
  // the device finishes the rest.
  Device& d = *dev_;
  for (int i : d.ready_order) {
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaEventSynchronize(d.copied[i]), "cudaEventSynchronize"));
    if (grad_ready_) grad_ready_(i);
  }
  return FetchMeanLoss(B * T);
}

absl::StatusOr<float> GptCuda::ForwardBackward(const int32_t* tokens,
                                               const int32_t* targets, int B,
                                               int T, bool accumulate) {
  if (dev_->resident) {
    return absl::FailedPreconditionError(
        "ForwardBackward on a resident model: call StopResident first");
  }
  absl::StatusOr<float> loss =
      RunForwardBackward(tokens, targets, B, T, accumulate);
  // After an error, let enqueued copies finish before the caller touches
  // grad_data or param_data.
  if (!loss.ok()) dev_->Synchronize().IgnoreError();
  return loss;
}

absl::StatusOr<float> GptCuda::Loss(const int32_t* tokens,
                                    const int32_t* targets, int B, int T) {
  absl::Status s = Prepare(tokens, targets, B, T);
  if (s.ok()) s = ForwardTrunk(B, T);
  if (s.ok()) s = HeadLoss(B * T, /*backward=*/false);
  if (!s.ok()) {
    dev_->Synchronize().IgnoreError();
    return s;
  }
  return FetchMeanLoss(B * T);
}

}  // namespace strata
