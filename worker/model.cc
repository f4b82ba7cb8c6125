#include "worker/model.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/gpt.h"
#include "worker/gpt_parallel.h"
#ifdef STRATA_HAVE_CUDA
#include "worker/gpt_cuda.h"
#endif

namespace strata {

absl::StatusOr<std::unique_ptr<Model>> CreateModel(
    const GptConfig& config, const std::string& device,
    ModelParallelism parallelism) {
  const bool split = parallelism.tp != 1 || parallelism.pp != 1;
  if (device == "cpu" && split) {
    absl::StatusOr<std::unique_ptr<ParallelGpt>> gpt =
        ParallelGpt::Create(config, parallelism);
    if (!gpt.ok()) return gpt.status();
    return std::unique_ptr<Model>(std::move(*gpt));
  }
  if (device == "cuda" && split) {
    return absl::UnimplementedError(
        "--tp and --pp run on CPU threads only so far (--device cpu); on "
        "GPUs they need the NCCL communicator, which is not built yet");
  }
  if (device == "cpu") {
    absl::StatusOr<std::unique_ptr<Gpt>> gpt = Gpt::Create(config);
    if (!gpt.ok()) return gpt.status();
    return std::unique_ptr<Model>(std::move(*gpt));
  }
  if (device == "cuda") {
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
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device \"", device, "\": expected \"cpu\" or \"cuda\""));
}

}  // namespace strata
