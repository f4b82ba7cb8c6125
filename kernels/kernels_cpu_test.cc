// CPU kernels: each backward against central finite differences of its
// forward, and the forwards against naive reference loops.
//
// The scalar checked is L = sum(out * w) for a fixed random w (so dout = w),
// accumulated in double. Steps of 1e-2 keep the float rounding of the
// forward (~1e-7 relative) far below the differences measured, and the
// O(eps^2) truncation error of central differences is ~1e-4.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/vec_math.h"

namespace strata::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double{a[i]} * b[i];
  return s;
}

// Compares analytic[i] with (loss(x+eps) - loss(x-eps)) / 2eps at up to
// `samples` positions i of x (spread over the whole array).
void ExpectGradient(const char* what, std::vector<float>& x,
                    const std::vector<float>& analytic,
                    const std::function<double()>& loss, int samples = 48,
                    float eps = 1e-2f, double atol = 2e-3, double rtol = 2e-2) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const size_t stride = std::max<size_t>(1, x.size() / samples);
  for (size_t i = stride / 2; i < x.size(); i += stride) {
    const float saved = x[i];
    x[i] = saved + eps;
    const double up = loss();
    x[i] = saved - eps;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic[i], numeric, atol + rtol * std::abs(numeric))
        << what << " at " << i;
  }
}

TEST(VecMath, ExpAndTanhMatchTheLibrary) {
  for (float x = -80.0f; x < 80.0f; x += 0.0137f) {
    ASSERT_NEAR(VecExp(x), std::exp(x), 4e-7f * std::exp(x)) << x;
    ASSERT_NEAR(VecTanh(x / 16), std::tanh(x / 16), 2e-7f) << x;
  }
  EXPECT_LT(VecExp(-1000.0f), 1e-37f);
  EXPECT_GT(VecTanh(1000.0f), 0.999999f);
  EXPECT_LT(VecTanh(-1000.0f), -0.999999f);
}

TEST(Gemm, MatchesNaiveProductForEveryTransposeAndSplit) {
  const int M = 97, N = 130, K = 65;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> A = Random(M * K, 1), B = Random(K * N, 2);
      std::vector<float> C = Random(M * N, 3), want = C;
      for (int m = 0; m < M; ++m) {
        for (int n = 0; n < N; ++n) {
          double s = 0;
          for (int k = 0; k < K; ++k) {
            s += double{ta ? A[k * M + m] : A[m * K + k]} *
                 (tb ? B[n * K + k] : B[k * N + n]);
          }
          want[m * N + n] = 0.5f * static_cast<float>(s) + 2.0f * C[m * N + n];
        }
      }
      Gemm(ta, tb, M, N, K, 0.5f, A.data(), ta ? M : K, B.data(), tb ? K : N,
           2.0f, C.data(), N);
      for (int i = 0; i < M * N; ++i) {
        ASSERT_NEAR(C[i], want[i], 1e-3 + 1e-4 * std::abs(want[i]));
      }
    }
  }
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  const int N = 37, C = 24, OC = 40;
  std::vector<float> inp = Random(N * C, 1), w = Random(OC * C, 2, 0.3f);
  std::vector<float> b = Random(OC, 3), dout = Random(N * OC, 4);
  std::vector<float> out(N * OC);
  auto loss = [&] {
    MatmulForward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return Dot(out, dout);
  };
  std::vector<float> dinp(N * C), dw(OC * C, 0.0f), db(OC, 0.0f);
  MatmulBackward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                 w.data(), N, C, OC);
  ExpectGradient("dinp", inp, dinp, loss);
  ExpectGradient("dweight", w, dw, loss);
  ExpectGradient("dbias", b, db, loss);
}

TEST(Matmul, AccumulateAddsToOutput) {
  const int N = 5, C = 3, OC = 4;
  std::vector<float> inp = Random(N * C, 1), w = Random(OC * C, 2);
  std::vector<float> b = Random(OC, 3), plain(N * OC), acc = Random(N * OC, 4);
  std::vector<float> before = acc;
  MatmulForward(plain.data(), inp.data(), w.data(), b.data(), N, C, OC);
  MatmulForward(acc.data(), inp.data(), w.data(), b.data(), N, C, OC, true);
  for (int i = 0; i < N * OC; ++i) {
    EXPECT_NEAR(acc[i], before[i] + plain[i], 1e-5);
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const int N = 19, C = 32;
  std::vector<float> inp = Random(N * C, 1), w = Random(C, 2);
  std::vector<float> b = Random(C, 3), dout = Random(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                     b.data(), N, C);
    return Dot(out, dout);
  };
  loss();
  std::vector<float> dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  LayerNormBackward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                    w.data(), mean.data(), rstd.data(), N, C);
  ExpectGradient("dinp", inp, dinp, loss);
  ExpectGradient("dweight", w, dw, loss);
  ExpectGradient("dbias", b, db, loss);
}

// Naive causal attention, as in llm.c's attention_forward_cpu.
std::vector<float> NaiveAttention(const std::vector<float>& qkv, int B, int T,
                                  int C, int NH) {
  const int hs = C / NH;
  std::vector<float> out(B * T * C, 0.0f);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        const float* q = &qkv[(b * T + t) * 3 * C + h * hs];
        std::vector<double> p(t + 1);
        double m = -1e30, sum = 0;
        for (int j = 0; j <= t; ++j) {
          const float* k = &qkv[(b * T + j) * 3 * C + C + h * hs];
          double s = 0;
          for (int i = 0; i < hs; ++i) s += double{q[i]} * k[i];
          p[j] = s / std::sqrt(hs);
          m = std::max(m, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - m));
        for (int j = 0; j <= t; ++j) {
          const float* v = &qkv[(b * T + j) * 3 * C + 2 * C + h * hs];
          for (int i = 0; i < hs; ++i) {
            out[(b * T + t) * C + h * hs + i] += p[j] / sum * v[i];
          }
        }
      }
    }
  }
  return out;
}

TEST(Attention, ForwardMatchesNaiveLoops) {
  // T spans several blocks and ends mid-block.
  const int B = 2, T = 2 * kAttentionBlock + 13, C = 16, NH = 2;
  std::vector<float> qkv = Random(B * T * 3 * C, 1);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  std::vector<float> want = NaiveAttention(qkv, B, T, C, NH);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << i;
  }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = kAttentionBlock + 9, C = 8, NH = 2;
  std::vector<float> qkv = Random(B * T * 3 * C, 1);
  std::vector<float> dout = Random(B * T * C, 2);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  auto loss = [&] {
    AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return Dot(out, dout);
  };
  loss();
  std::vector<float> dqkv(qkv.size(), 123.0f), scratch(att.size(), 7.0f);
  AttentionBackward(dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                    att.data(), B, T, C, NH);
  ExpectGradient("dqkv", qkv, dqkv, loss, 200);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  const int n = 1000;
  std::vector<float> inp = Random(n, 1, 2.0f), dout = Random(n, 2);
  std::vector<float> out(n);
  auto loss = [&] {
    GeluForward(out.data(), inp.data(), n);
    return Dot(out, dout);
  };
  std::vector<float> dinp(n);
  GeluBackward(dinp.data(), inp.data(), dout.data(), n);
  ExpectGradient("dinp", inp, dinp, loss, 100, 1e-3f);
  GeluForward(out.data(), inp.data(), n);
  for (int i = 0; i < n; ++i) {
    const double x = inp[i];
    const double want =
        0.5 * x *
        (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    ASSERT_NEAR(out[i], want, 1e-5);
  }
}

TEST(Residual, ForwardAddsAndBackwardAccumulatesIntoBoth) {
  const int n = 100;
  std::vector<float> a = Random(n, 1), b = Random(n, 2), out(n);
  ResidualForward(out.data(), a.data(), b.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  std::vector<float> da(n, 1.0f), db(n, 2.0f);
  ResidualBackward(da.data(), db.data(), out.data(), n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(da[i], 1.0f + out[i]);
    EXPECT_EQ(db[i], 2.0f + out[i]);
  }
}

TEST(Encoder, BackwardMatchesFiniteDifferencesWithRepeatedTokens) {
  const int B = 3, T = 5, C = 8, V = 4;
  std::vector<int32_t> tokens = {0, 1, 1, 3, 0, 2, 2, 2, 1, 0, 3, 3, 1, 0, 1};
  std::vector<float> wte = Random(V * C, 1), wpe = Random(T * C, 2);
  std::vector<float> dout = Random(B * T * C, 3), out(B * T * C);
  auto loss = [&] {
    EncoderForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return Dot(out, dout);
  };
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  EncoderBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T,
                  C);
  ExpectGradient("dwte", wte, dwte, loss, 1000);
  ExpectGradient("dwpe", wpe, dwpe, loss, 1000);
}

TEST(CrossEntropy, FusedGradientMatchesFiniteDifferencesOfForward) {
  const int N = 7, V = 300;
  std::vector<float> logits = Random(N * V, 1, 3.0f);
  std::vector<int32_t> targets = {0, 299, 5, 5, 17, 100, 250};
  std::vector<float> losses(N);
  const float dloss = 1.0f / N;
  auto loss = [&] {
    CrossEntropyForward(losses.data(), logits.data(), targets.data(), N, V);
    double s = 0;
    for (float l : losses) s += l;
    return s * dloss;
  };
  const double want = loss();
  std::vector<float> grad = logits, fused_losses(N);
  const float sum = SoftmaxCrossEntropyFused(grad.data(), targets.data(), dloss,
                                             fused_losses.data(), N, V);
  EXPECT_NEAR(sum * dloss, want, 1e-5);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(fused_losses[n], losses[n], 1e-5);
  ExpectGradient("dlogits", logits, grad, loss, 300, 1e-2f, 1e-4, 1e-2);
}

TEST(CrossEntropy, ForwardMatchesLogSoftmax) {
  const int V = 3;
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  std::vector<int32_t> target = {1};
  float loss;
  CrossEntropyForward(&loss, logits.data(), target.data(), 1, V);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(loss, lse - 2.0, 1e-6);
}

}  // namespace
}  // namespace strata::kernels
