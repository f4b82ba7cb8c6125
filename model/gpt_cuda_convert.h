// Dtype conversion on the device for GptCuda. Private to model/.
#ifndef STRATA_MODEL_GPT_CUDA_CONVERT_H_
#define STRATA_MODEL_GPT_CUDA_CONVERT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda_ops.h"

namespace strata::gpt_cuda {

// out[i] = bf16(in[i]) (round to nearest even) for i in [0, n), enqueued on
// `stream`. Device pointers. INVALID_ARGUMENT for n < 0; INTERNAL for a
// launch error.
absl::Status FloatToBf16(cudaStream_t stream, kernels::cuda::bf16* out,
                         const float* in, int64_t n);

}  // namespace strata::gpt_cuda

#endif  // STRATA_MODEL_GPT_CUDA_CONVERT_H_
