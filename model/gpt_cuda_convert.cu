// fp32 -> bf16 conversion of GptCuda's weights; the kernel is in
// gpt_cuda_convert_kernels.cuh.
#include "absl/strings/str_cat.h"
#include "model/gpt_cuda_convert.h"
#include "model/gpt_cuda_convert_kernels.cuh"

namespace strata::gpt_cuda {

using namespace convert;  // NOLINT: this file launches it

absl::Status FloatToBf16(cudaStream_t stream, kernels::cuda::bf16* out,
                         const float* in, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("FloatToBf16: n < 0");
  if (n == 0) return absl::OkStatus();
  STRATA_LAUNCH(FloatToBf16Kernel, FloatToBf16Blocks(n), kThreads, 0, stream,
                out, in, n);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("FloatToBf16Kernel: ", cudaGetErrorString(err)));
}

}  // namespace strata::gpt_cuda
