// Token + position embedding, forward and backward.
#ifndef STRATA_KERNELS_ENCODER_H_
#define STRATA_KERNELS_ENCODER_H_

#include <cstdint>

namespace strata::kernels {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
// out is (B,T,C), tokens is (B,T), wte is (V,C), wpe is (>=T,C).
// REQUIRES: every token in [0, V) (the caller validates).
void EncoderForward(float* out, const int32_t* tokens, const float* wte,
                    const float* wpe, int B, int T, int C);

// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:].
// dout is (B,T,C), dwte is (V,C), dwpe is (>=T,C).
void EncoderBackward(float* dwte, float* dwpe, const float* dout,
                     const int32_t* tokens, int B, int T, int C);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ENCODER_H_
