// GptCuda's resident training: weights, gradients and the Adam state stay
// on the device, and the update runs there, one launch for all parameters
// (kernels::cuda::AdamUpdateSpans).
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda_ops.h"
#include "model/gpt_cuda.h"
#include "model/gpt_cuda_convert.h"
#include "model/gpt_cuda_device.h"
#include "optim/optimizer.h"

namespace strata {

using gpt_cuda::CudaStatus;

absl::Status GptCuda::StartResident(const OptimizerParams& opt) {
  if (opt.kind != OptimizerParams::kAdam &&
      opt.kind != OptimizerParams::kAdamW) {
    return absl::InvalidArgumentError(
        "resident training runs Adam or AdamW only");
  }
  STRATA_RETURN_IF_ERROR(ValidateOptimizerParams(opt));
  if (config().experts > 0) {
    // One update over the whole buffer would treat an expert no token
    // reached as one with a zero gradient (its moments decay, its weight
    // decays); the servers leave it alone.
    return absl::UnimplementedError(
        "resident training of mixture-of-experts layers is not built: train "
        "them through servers");
  }
  Device& d = *dev_;
  if (d.resident) {
    return absl::FailedPreconditionError("the model is already resident");
  }
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  // As the trainer configures the servers: decay on matrices only. One
  // span per parameter, and one for the padding after it, if any (the
  // padded vocabulary's rows of wte), which the update leaves alone.
  d.adam_opt[0] = opt;
  d.adam_opt[0].weight_decay = 0;
  d.adam_opt[1] = opt;
  std::vector<int64_t> starts;
  std::vector<uint8_t> kinds;
  for (size_t i = 0; i < params().size(); ++i) {
    const int64_t end =
        d.offsets[i] + static_cast<int64_t>(params()[i].spec.numel());
    const int64_t next = i + 1 < d.offsets.size() ? d.offsets[i + 1] : d.total;
    starts.push_back(d.offsets[i]);
    kinds.push_back(params()[i].spec.group == "decay" ? 1 : 0);
    if (end < next) {
      starts.push_back(end);
      kinds.push_back(kernels::cuda::kAdamSpanUntouched);
    }
  }
  starts.push_back(d.total);
  d.num_spans = static_cast<int>(kinds.size());
  const int64_t starts_bytes = static_cast<int64_t>(starts.size()) * 8;
  STRATA_RETURN_IF_ERROR(
      d.adam_spans.Reserve(starts_bytes + static_cast<int64_t>(kinds.size())));
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(d.adam_spans.as<char>(), starts.data(),
                            starts_bytes, cudaMemcpyHostToDevice),
                 "copy Adam spans"));
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(d.adam_spans.as<char>() + starts_bytes,
                            kinds.data(), kinds.size(), cudaMemcpyHostToDevice),
                 "copy Adam spans"));
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
  if (s.ok()) {
    s = Op("adam", [&] {
      const auto* starts = d.adam_spans.as<int64_t>();
      const auto* kinds =
          reinterpret_cast<const uint8_t*>(starts + d.num_spans + 1);
      return kernels::cuda::AdamUpdateSpans(
          *d.ctx, d.master.as<float>(), d.weights.as<gpt_cuda::bf16>(),
          d.adam_m.as<float>(), d.adam_v.as<float>(), d.grads.as<float>(),
          starts, kinds, d.num_spans, d.total,
          MakeAdamStep(d.adam_opt[0], ScheduledLr(d.adam_opt[0], step),
                       step + 1),
          MakeAdamStep(d.adam_opt[1], ScheduledLr(d.adam_opt[1], step),
                       step + 1));
    });
  }
  if (!s.ok()) {
    d.Synchronize().IgnoreError();
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
  d.adam_spans.Release();
  d.resident = false;
  return absl::OkStatus();
}

}  // namespace strata
