// Residual connection: elementwise sum, forward and backward.
#ifndef STRATA_KERNELS_RESIDUAL_H_
#define STRATA_KERNELS_RESIDUAL_H_

#include <cstdint>

namespace strata::kernels {

// out = a + b. out, a, b are (n); out may alias either input.
void ResidualForward(float* out, const float* a, const float* b, int64_t n);

// da += dout, db += dout. All are (n).
void ResidualBackward(float* da, float* db, const float* dout, int64_t n);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_RESIDUAL_H_
