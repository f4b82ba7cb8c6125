// fp32 -> bf16 conversion of GptCuda's weights.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/gpt_cuda_convert.h"

namespace strata::gpt_cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride, so any n fits in a bounded grid.
__global__ void FloatToBf16Kernel(kernels::cuda::bf16* out, const float* in,
                                  int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += stride) {
    out[i] = __float2bfloat16(in[i]);
  }
}

}  // namespace

absl::Status FloatToBf16(cudaStream_t stream, kernels::cuda::bf16* out,
                         const float* in, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("FloatToBf16: n < 0");
  if (n == 0) return absl::OkStatus();
  const int64_t blocks =
      std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16);
  FloatToBf16Kernel<<<static_cast<int>(blocks), kThreads, 0, stream>>>(out, in,
                                                                       n);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("FloatToBf16Kernel: ", cudaGetErrorString(err)));
}

}  // namespace strata::gpt_cuda
