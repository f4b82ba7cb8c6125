#include "kernels/layernorm.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/parallel.h"

namespace strata::kernels {

void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int N, int C) {
  ParallelFor(N, 8, [&](int, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = inp + n * C;
      float* y = out + n * C;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int c = 0; c < C; ++c) sum += x[c];
      const float m = sum / C;
      float var = 0;
#pragma omp simd reduction(+ : var)
      for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
      const float s = 1.0f / std::sqrt(var / C + kLayerNormEps);
      for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
      mean[n] = m;
      rstd[n] = s;
    }
  });
}

void LayerNormBackward(float* dinp, float* dweight, float* dbias,
                       const float* dout, const float* inp, const float* weight,
                       const float* mean, const float* rstd, int N, int C) {
  // Each chunk sums its rows' dweight/dbias into its own scratch row; the
  // rows are added at the end (in chunk order, so results are reproducible).
  const int chunks = NumChunks(N, 8);
  std::vector<float> partial(static_cast<size_t>(chunks) * 2 * C, 0.0f);
  ParallelFor(N, 8, [&](int chunk, int64_t n0, int64_t n1) {
    float* dw = partial.data() + int64_t{chunk} * 2 * C;
    float* db = dw + C;
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      float* dx = dinp + n * C;
      const float m = mean[n], s = rstd[n];
      // dnorm = dy * weight; dx = s * (dnorm - mean(dnorm) - norm *
      // mean(dnorm * norm)).
      float dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = dy[c] * weight[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
        dw[c] += dy[c] * norm;
        db[c] += dy[c];
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
      for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = dy[c] * weight[c];
        dx[c] += s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
      }
    }
  });
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const float* dw = partial.data() + int64_t{chunk} * 2 * C;
    for (int c = 0; c < C; ++c) {
      dweight[c] += dw[c];
      dbias[c] += dw[C + c];
    }
  }
}

}  // namespace strata::kernels
