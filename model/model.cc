#include "model/model.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/gpt.h"
#include "model/gpt_expert_parallel.h"
#include "model/gpt_parallel.h"
#ifdef STRATA_HAVE_CUDA
#include "model/gpt_cuda.h"
#endif

namespace strata {

absl::StatusOr<Device> ParseDevice(absl::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device \"", name, "\": expected \"cpu\" or \"cuda\""));
}

const char* DeviceName(Device device) {
  return device == Device::kCuda ? "cuda" : "cpu";
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(
    const GptConfig& config, Device device, ModelParallelism parallelism) {
  const bool split = parallelism.tp != 1 || parallelism.pp != 1;
  if (parallelism.ep != 1) {
    if (split) {
      return absl::UnimplementedError(
          "--ep with --tp or --pp is not built: expert parallelism splits "
          "the batch over ranks that each hold the whole dense model");
    }
    if (device != Device::kCpu) {
      return absl::UnimplementedError(
          "--ep runs on CPU threads only so far (--device cpu); on GPUs it "
          "needs the NCCL communicator, which is not built yet");
    }
    absl::StatusOr<std::unique_ptr<ExpertParallelGpt>> gpt =
        ExpertParallelGpt::Create(config, parallelism.ep);
    if (!gpt.ok()) return gpt.status();
    return std::unique_ptr<Model>(std::move(*gpt));
  }
  if (device == Device::kCpu && split) {
    absl::StatusOr<std::unique_ptr<ParallelGpt>> gpt =
        ParallelGpt::Create(config, parallelism);
    if (!gpt.ok()) return gpt.status();
    return std::unique_ptr<Model>(std::move(*gpt));
  }
  if (device == Device::kCuda && split) {
    return absl::UnimplementedError(
        "--tp and --pp run on CPU threads only so far (--device cpu); on "
        "GPUs they need the NCCL communicator, which is not built yet");
  }
  if (device == Device::kCpu) {
    absl::StatusOr<std::unique_ptr<Gpt>> gpt = Gpt::Create(config);
    if (!gpt.ok()) return gpt.status();
    return std::unique_ptr<Model>(std::move(*gpt));
  }
#ifdef STRATA_HAVE_CUDA
  absl::StatusOr<std::unique_ptr<GptCuda>> gpt = GptCuda::Create(config);
  if (!gpt.ok()) return gpt.status();
  return std::unique_ptr<Model>(std::move(*gpt));
#else
  return absl::UnavailableError(
      "device \"cuda\": this Strata was built without CUDA (configure with "
      "-DSTRATA_CUDA=ON on a machine with nvcc)");
#endif
}

}  // namespace strata
