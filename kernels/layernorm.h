// Layer normalization over the last dimension, forward and backward.
#ifndef STRATA_KERNELS_LAYERNORM_H_
#define STRATA_KERNELS_LAYERNORM_H_

namespace strata::kernels {

inline constexpr float kLayerNormEps = 1e-5f;

// out = (inp - mean) * rstd * weight + bias, per row; saves mean and rstd
// (1 / sqrt(var + eps), biased variance) for the backward pass.
// out and inp are (N,C), weight and bias are (C), mean and rstd are (N).
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int N, int C);

// Backward of LayerNormForward: dinp += dL/dinp, dweight += dL/dweight,
// dbias += dL/dbias (all accumulated).
// dinp, dout, inp are (N,C), dweight, dbias, weight are (C), mean, rstd (N).
void LayerNormBackward(float* dinp, float* dweight, float* dbias,
                       const float* dout, const float* inp, const float* weight,
                       const float* mean, const float* rstd, int N, int C);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_LAYERNORM_H_
