#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/parallel.h"
#include "kernels/matmul.h"
#include "kernels/vec_math.h"

namespace strata::kernels {
namespace {

// Pointers and strides of one (batch, head) pair.
struct Head {
  const float* q;  // (T,hs), row stride 3C
  const float* k;
  const float* v;
  int ld;  // 3C
};

Head HeadOf(const float* qkv, int b, int h, int T, int C, int NH) {
  const int hs = C / NH;
  const float* base = qkv + int64_t{b} * T * 3 * C + h * hs;
  return {base, base + C, base + 2 * C, 3 * C};
}

// In-place causal softmax of row t of S (T columns): columns <= t become
// probabilities, the rest 0.
void CausalSoftmaxRow(float* s, int t, int T) {
  float m = s[0];
#pragma omp simd reduction(max : m)
  for (int j = 1; j <= t; ++j) m = std::max(m, s[j]);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= t; ++j) {
    s[j] = VecExp(s[j] - m);
    sum += s[j];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j <= t; ++j) s[j] *= inv;
  std::memset(s + t + 1, 0, sizeof(float) * (T - t - 1));
}

// dS = P * (dP - sum_j P*dP) on columns <= t of row t (in place in dp);
// columns above t become 0.
void SoftmaxBackwardRow(float* dp, const float* p, int t, int T) {
  float dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int j = 0; j <= t; ++j) dot += p[j] * dp[j];
#pragma omp simd
  for (int j = 0; j <= t; ++j) dp[j] = p[j] * (dp[j] - dot);
  std::memset(dp + t + 1, 0, sizeof(float) * (T - t - 1));
}

void ForwardHead(float* out, float* S, const Head& x, int T, int C, int hs) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int i0 = 0; i0 < T; i0 += kAttentionBlock) {
    const int i1 = std::min(T, i0 + kAttentionBlock);
    // S[i0:i1, 0:i1] = scale * Q[i0:i1] K[0:i1]^T
    Gemm(false, true, i1 - i0, i1, hs, scale, x.q + int64_t{i0} * x.ld, x.ld,
         x.k, x.ld, 0.0f, S + int64_t{i0} * T, T);
    for (int t = i0; t < i1; ++t) CausalSoftmaxRow(S + int64_t{t} * T, t, T);
    // out[i0:i1] = P[i0:i1, 0:i1] V[0:i1]
    Gemm(false, false, i1 - i0, hs, i1, 1.0f, S + int64_t{i0} * T, T, x.v, x.ld,
         0.0f, out + int64_t{i0} * C, C);
  }
}

void BackwardHead(float* dq, float* dP, const float* dout, const float* P,
                  const Head& x, int T, int C, int hs) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ld = x.ld;
  float* dk = dq + C;
  float* dv = dq + 2 * C;
  for (int i0 = 0; i0 < T; i0 += kAttentionBlock) {
    const int i1 = std::min(T, i0 + kAttentionBlock);
    // dP[i0:i1, 0:i1] = dO[i0:i1] V[0:i1]^T, then through the softmax.
    Gemm(false, true, i1 - i0, i1, hs, 1.0f, dout + int64_t{i0} * C, C, x.v, ld,
         0.0f, dP + int64_t{i0} * T, T);
    for (int t = i0; t < i1; ++t) {
      SoftmaxBackwardRow(dP + int64_t{t} * T, P + int64_t{t} * T, t, T);
    }
    // dQ[i0:i1] = scale * dS[i0:i1, 0:i1] K[0:i1]
    Gemm(false, false, i1 - i0, hs, i1, scale, dP + int64_t{i0} * T, T, x.k, ld,
         0.0f, dq + int64_t{i0} * ld, ld);
  }
  // Key/value rows j0:j1 get contributions from query rows j0:T only.
  for (int j0 = 0; j0 < T; j0 += kAttentionBlock) {
    const int j1 = std::min(T, j0 + kAttentionBlock);
    const int64_t corner = int64_t{j0} * T + j0;
    // dV[j0:j1] = P[j0:T, j0:j1]^T dO[j0:T]
    Gemm(true, false, j1 - j0, hs, T - j0, 1.0f, P + corner, T,
         dout + int64_t{j0} * C, C, 0.0f, dv + int64_t{j0} * ld, ld);
    // dK[j0:j1] = scale * dS[j0:T, j0:j1]^T Q[j0:T]
    Gemm(true, false, j1 - j0, hs, T - j0, scale, dP + corner, T,
         x.q + int64_t{j0} * ld, ld, 0.0f, dk + int64_t{j0} * ld, ld);
  }
}

}  // namespace

void AttentionForward(float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH) {
  const int hs = C / NH;
  ParallelFor(int64_t{B} * NH, 1, [&](int, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int b = static_cast<int>(p / NH), h = static_cast<int>(p % NH);
      ForwardHead(out + int64_t{b} * T * C + h * hs, att + p * T * T,
                  HeadOf(qkv, b, h, T, C, NH), T, C, hs);
    }
  });
}

void AttentionBackward(float* dqkv, float* scratch, const float* dout,
                       const float* qkv, const float* att, int B, int T, int C,
                       int NH) {
  const int hs = C / NH;
  ParallelFor(int64_t{B} * NH, 1, [&](int, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int b = static_cast<int>(p / NH), h = static_cast<int>(p % NH);
      const int64_t offset = int64_t{b} * T * 3 * C + h * hs;
      BackwardHead(dqkv + offset, scratch + p * T * T,
                   dout + int64_t{b} * T * C + h * hs, att + p * T * T,
                   HeadOf(qkv, b, h, T, C, NH), T, C, hs);
    }
  });
}

}  // namespace strata::kernels
