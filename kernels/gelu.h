// GELU activation (tanh approximation, as in GPT-2), forward and backward.
#ifndef STRATA_KERNELS_GELU_H_
#define STRATA_KERNELS_GELU_H_

#include <cstdint>

namespace strata::kernels {

// out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), elementwise.
// out and inp are (n); they may alias.
void GeluForward(float* out, const float* inp, int64_t n);

// dinp = gelu'(inp) * dout (overwritten). dinp may alias dout.
// dinp, inp, dout are (n).
void GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_GELU_H_
