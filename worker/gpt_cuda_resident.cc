// GptCuda's resident training: weights, gradients and the Adam state stay
// on the device, and the update runs there (kernels::cuda::AdamUpdate).
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda_ops.h"
#include "kernels/optimizer.h"
#include "worker/gpt_cuda.h"
#include "worker/gpt_cuda_convert.h"
#include "worker/gpt_cuda_device.h"

namespace strata {

using gpt_cuda::CudaStatus;

absl::Status GptCuda::StartResident(const OptimizerParams& opt) {
  if (opt.kind != OptimizerParams::kAdam &&
      opt.kind != OptimizerParams::kAdamW) {
    return absl::InvalidArgumentError(
        "resident training runs Adam or AdamW only");
  }
  STRATA_RETURN_IF_ERROR(ValidateOptimizerParams(opt));
  Device& d = *dev_;
  if (d.resident) {
    return absl::FailedPreconditionError("the model is already resident");
  }
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  d.param_opt.clear();
  for (const ParamInfo& p : params()) {
    OptimizerParams o = opt;
    // As the trainer configures the servers: decay on matrices only.
    if (p.spec.group != "decay") o.weight_decay = 0;
    d.param_opt.push_back(o);
  }
  STRATA_RETURN_IF_ERROR(d.adam_m.Reserve(d.total * 4));
  STRATA_RETURN_IF_ERROR(d.adam_v.Reserve(d.total * 4));
  cudaStream_t s = d.ctx->stream();
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(d.adam_m.as<float>(), 0, d.total * 4, s),
                 "clear Adam state"));
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(d.adam_v.as<float>(), 0, d.total * 4, s),
                 "clear Adam state"));
  STRATA_RETURN_IF_ERROR(d.ToDevice(d.master.as<float>(), param_data(0)));
  STRATA_RETURN_IF_ERROR(gpt_cuda::FloatToBf16(
      s, d.weights.as<gpt_cuda::bf16>(), d.master.as<float>(), d.total));
  STRATA_RETURN_IF_ERROR(d.ctx->Synchronize());
  d.resident = true;
  return absl::OkStatus();
}

absl::StatusOr<float> GptCuda::ResidentStep(const int32_t* tokens,
                                            const int32_t* targets, int B,
                                            int T, int64_t step) {
  Device& d = *dev_;
  if (!d.resident) {
    return absl::FailedPreconditionError("ResidentStep before StartResident");
  }
  if (step < 0) return absl::InvalidArgumentError("step must be >= 0");
  absl::Status s = Prepare(tokens, targets, B, T);
  if (s.ok()) s = EnqueueForwardBackward(B, T, /*accumulate=*/false);
  for (size_t i = 0; s.ok() && i < d.offsets.size(); ++i) {
    const OptimizerParams& o = d.param_opt[i];
    const int64_t off = d.offsets[i];
    s = Op("adam", [&] {
      return kernels::cuda::AdamUpdate(
          *d.ctx, d.master.as<float>() + off,
          d.weights.as<gpt_cuda::bf16>() + off, d.adam_m.as<float>() + off,
          d.adam_v.as<float>() + off, d.grads.as<float>() + off,
          static_cast<int64_t>(params()[i].spec.numel()),
          MakeAdamStep(o, ScheduledLr(o, step), step + 1));
    });
  }
  if (!s.ok()) {
    d.ctx->Synchronize().IgnoreError();
    return s;
  }
  return FetchMeanLoss(B * T);
}

absl::Status GptCuda::StopResident() {
  Device& d = *dev_;
  if (!d.resident) return absl::OkStatus();
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  STRATA_RETURN_IF_ERROR(d.ToHost(param_data(0), d.master.as<float>()));
  STRATA_RETURN_IF_ERROR(d.ctx->Synchronize());
  d.adam_m.Release();
  d.adam_v.Release();
  d.resident = false;
  return absl::OkStatus();
}

}  // namespace strata
