// Elementwise math that vectorizes: glibc's expf/tanhf are scalar calls
// unless the whole file is built with -ffast-math, which we avoid.
// Private to kernels/.
#ifndef STRATA_KERNELS_VEC_MATH_H_
#define STRATA_KERNELS_VEC_MATH_H_

#include <algorithm>
#include <bit>
#include <cstdint>

namespace strata::kernels {

// exp(x) within ~2 ulp for x in [-87, 88] (Cephes expf: x = n ln2 + r,
// |r| <= ln2/2, a degree-7 polynomial for exp(r), then 2^n through the
// exponent bits). Inputs outside are clamped: exp(-87.3) ~ 1e-38 stands in
// for 0, which is what softmax needs.
inline float VecExp(float x) {
  x = std::min(88.3762626647949f, std::max(-87.3365447505531f, x));
  // Round to nearest by adding and subtracting 1.5 * 2^23 (std::floor
  // blocks vectorization in GCC 12 with AVX-512).
  const float shifter = 12582912.0f;
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// tanh(x) = 1 - 2 / (exp(2x) + 1); absolute error ~1e-7.
inline float VecTanh(float x) {
  return 1.0f - 2.0f / (VecExp(2.0f * x) + 1.0f);
}

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_VEC_MATH_H_
