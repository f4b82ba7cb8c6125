#include "kernels/encoder.h"

#include "common/parallel.h"

namespace strata::kernels {

void EncoderForward(float* out, const int32_t* tokens, const float* wte,
                    const float* wpe, int B, int T, int C) {
  ParallelFor(int64_t{B} * T, 16, [&](int, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* te = wte + int64_t{tokens[n]} * C;
      const float* pe = wpe + (n % T) * C;
      float* o = out + n * C;
      for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
  });
}

void EncoderBackward(float* dwte, float* dwpe, const float* dout,
                     const int32_t* tokens, int B, int T, int C) {
  // Each chunk owns a range of channels, so repeated tokens never race.
  ParallelFor(C, 16, [&](int, int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < int64_t{B} * T; ++n) {
      const float* d = dout + n * C;
      float* te = dwte + int64_t{tokens[n]} * C;
      float* pe = dwpe + (n % T) * C;
      for (int64_t c = c0; c < c1; ++c) {
        te[c] += d[c];
        pe[c] += d[c];
      }
    }
  });
}

}  // namespace strata::kernels
