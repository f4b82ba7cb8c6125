// Bf16ErrorFeedback: what a run of pushes sums to, with and without it.
#include "client/error_feedback.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/bf16.h"
#include "common/compress.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

float RoundBf16(float x) { return Bf16ToFloat(FloatToBf16(x)); }

// Encodes g with `ef` under `key` and returns the values sent.
std::vector<float> Push(Bf16ErrorFeedback& ef, int key,
                        const std::vector<float>& g) {
  std::vector<uint16_t> out(g.size());
  ef.Encode(key, g.data(), out.data(), static_cast<int64_t>(g.size()));
  std::vector<float> sent(g.size());
  Bf16ToFloat(out.data(), sent.data(), out.size());
  return sent;
}

// A gradient of 1 + 2^-10 every step: bf16 (unit in the last place, ulp,
// 2^-7 at 1) rounds it to 1, so 128 plain pushes sum to 128 and lose 1/8.
// With the error carried, the sum stays within one rounding of 128.125.
TEST(Bf16ErrorFeedback, KeepsTheSumOfPushesWithinOneRoundingOfTheGradients) {
  constexpr int kSteps = 128;
  const float grad = 1.0f + std::ldexp(1.0f, -10);
  Bf16ErrorFeedback ef;
  double plain = 0, fed = 0, exact = 0;
  for (int t = 0; t < kSteps; ++t) {
    const std::vector<float> sent = Push(ef, /*key=*/3, {grad, -grad});
    EXPECT_EQ(sent[1], -sent[0]);
    plain += RoundBf16(grad);
    fed += sent[0];
    exact += grad;
  }
  EXPECT_EQ(plain, kSteps);  // the bias error feedback removes
  EXPECT_NEAR(fed, exact, std::ldexp(1.0, -8));
}

// Below, at 1 a quarter ulp is 2^-9 and half an ulp 2^-8 (a tie, rounded
// to the even 1).
TEST(Bf16ErrorFeedback, NonFiniteValuesPassAndCarryNothing) {
  Bf16ErrorFeedback ef;
  // A NaN whose bits are all ones: rounding by the bits alone would wrap
  // it to zero.
  const uint32_t ones = 0xffffffffu;
  float odd_nan;
  std::memcpy(&odd_nan, &ones, 4);
  {
    const std::vector<float> sent = Push(ef, 1, {odd_nan, 1.0f});
    EXPECT_TRUE(std::isnan(sent[0]));
    EXPECT_EQ(sent[1], 1.0f);
    // And it left no NaN to carry.
    EXPECT_EQ(Push(ef, 1, {0.5f, 0.5f}), (std::vector<float>{0.5f, 0.5f}));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float huge = std::numeric_limits<float>::max();  // rounds to inf
  std::vector<float> sent =
      Push(ef, 0, {nan, huge, 1.0f + 3 * std::ldexp(1.0f, -9), 0.5f});
  EXPECT_TRUE(std::isnan(sent[0]));
  EXPECT_TRUE(std::isinf(sent[1]));  // as plain rounding sends it
  EXPECT_EQ(sent[2], 1.0f + std::ldexp(1.0f, -7));  // carries -1/4 ulp
  EXPECT_EQ(sent[3], 0.5f);
  // Clean where the last push was not finite; the error carried where it
  // was: 5/8 ulp alone rounds up, 5/8 - 1/4 down.
  const float five_eighths =
      1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -10);
  ASSERT_EQ(RoundBf16(five_eighths), 1.0f + std::ldexp(1.0f, -7));
  sent = Push(ef, 0, {0.25f, 0.25f, five_eighths, 0.5f});
  EXPECT_EQ(sent, (std::vector<float>{0.25f, 0.25f, 1.0f, 0.5f}));
}

TEST(Bf16ErrorFeedback, ResetDropsTheCarriedError) {
  const float half_ulp = 1.0f + std::ldexp(1.0f, -8);
  for (bool reset : {false, true}) {
    Bf16ErrorFeedback ef;
    // Carries +1/4 ulp.
    ASSERT_EQ(Push(ef, 0, {1.0f + std::ldexp(1.0f, -9)})[0], 1.0f);
    if (reset) ef.Reset();
    EXPECT_EQ(Push(ef, 0, {half_ulp})[0],
              reset ? 1.0f : 1.0f + std::ldexp(1.0f, -7))
        << reset;
  }
}

// Each key (chunk) carries its own error, at any length.
TEST(Bf16ErrorFeedback, CarriesEachKeysErrorOnItsOwn) {
  const size_t n = (size_t{1} << 17) + 5;
  Bf16ErrorFeedback ef;
  Push(ef, 0, std::vector<float>(n, 1.0f + std::ldexp(1.0f, -9)));  // +1/4
  Push(ef, 1, std::vector<float>(n, 3.0f));  // exact: carries nothing
  const std::vector<float> tie(n, 1.0f + std::ldexp(1.0f, -8));
  const std::vector<float> a = Push(ef, 0, tie), b = Push(ef, 1, tie);
  for (size_t k : {size_t{0}, n / 2, n - 1}) {
    EXPECT_EQ(a[k], 1.0f + std::ldexp(1.0f, -7)) << k;  // 3/4 ulp: up
    EXPECT_EQ(b[k], 1.0f) << k;                         // the tie: even
  }
}

// The error-feedback invariant: after T pushes, what the server decoded
// plus the error still carried equals the sum of the gradients, per
// element, up to the float rounding of the sender's two additions a step
// (want = g + e, then e' = want - decoded, each within 2^-24 of its
// result): |sum d_t + e_T - sum g_t| <= sum_t 2^-24 (|want_t| + |e_t+1|).
// ONEBIT and TOPK at 1%, 200 steps of 1000 elements.
TEST(CompressedErrorFeedback, DecodedPlusCarriedEqualsTheGradientsSum) {
  for (v1::DType dtype : {v1::DTYPE_ONEBIT, v1::DTYPE_TOPK}) {
    SCOPED_TRACE(dtype);
    const size_t n = 1000;
    CompressedErrorFeedback ef(dtype, 0.01);
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0.1f, 1.0f);  // a bias to carry
    std::vector<double> sent(n, 0.0), gsum(n, 0.0), bound(n, 0.0);
    std::vector<float> g(n), decoded(n), e(n, 0.0f);
    double carried_most = 0;
    for (int t = 0; t < 200; ++t) {
      for (size_t i = 0; i < n; ++i) g[i] = d(rng);
      std::string bytes;
      ef.Encode(0, g.data(), n, &bytes);
      ASSERT_TRUE((dtype == v1::DTYPE_ONEBIT
                       ? DecodeOneBit(bytes, n, decoded.data())
                       : DecodeTopK(bytes, n, decoded.data()))
                      .ok());
      if (dtype == v1::DTYPE_TOPK) {
        ASSERT_EQ(bytes.size(), 8u * 10);
      }
      const std::vector<float> next = ef.Carried(0);
      ASSERT_EQ(next.size(), n);
      for (size_t i = 0; i < n; ++i) {
        const float want = g[i] + e[i];
        sent[i] += decoded[i];
        gsum[i] += g[i];
        bound[i] += std::ldexp(std::fabs(want) + std::fabs(next[i]), -24);
        carried_most = std::max<double>(carried_most, std::fabs(next[i]));
      }
      e = next;
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_LE(std::fabs(sent[i] + e[i] - gsum[i]), bound[i] + 1e-12) << i;
    }
    // Something was left out and carried (else the test shows nothing).
    EXPECT_GT(carried_most, 0.1);
  }
}

// DGC's momentum correction: each push compresses u = 0.9 u + g plus the
// carried velocity, the elements sent restart their momentum (masking),
// and the rest carry on; the same float steps written out here, 50 pushes
// of 4096 elements at 1%. A NaN gradient drops both.
TEST(CompressedErrorFeedback, MomentumCorrectionKeepsAndMasksTheMomentum) {
  const size_t n = 4096;
  const float m = 0.9f;
  CompressedErrorFeedback ef(v1::DTYPE_TOPK, 0.01, m);
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.05f, 1.0f);
  std::vector<float> g(n), u(n, 0.0f), e(n, 0.0f), decoded(n);
  for (int t = 0; t < 50; ++t) {
    for (float& x : g) x = d(rng);
    std::string bytes;
    ef.Encode(0, g.data(), n, &bytes);
    ASSERT_EQ(bytes.size(), 8u * 41);
    ASSERT_TRUE(DecodeTopK(bytes, n, decoded.data()).ok());
    std::vector<bool> sent(n, false);
    for (size_t j = 0; j < bytes.size() / 8; ++j) {
      uint32_t i;
      std::memcpy(&i, bytes.data() + 8 * j, 4);
      sent[i] = true;
    }
    for (size_t i = 0; i < n; ++i) {
      u[i] = m * u[i] + g[i];
      const float want = u[i] + e[i];
      if (sent[i]) {
        ASSERT_EQ(decoded[i], want) << t << " " << i;
      }
      e[i] = want - decoded[i];
      if (sent[i]) u[i] = 0;
    }
    ASSERT_EQ(ef.Momentum(0), u) << t;
    ASSERT_EQ(ef.Carried(0), e) << t;
  }
  g[0] = std::numeric_limits<float>::quiet_NaN();
  std::string bytes;
  ef.Encode(0, g.data(), n, &bytes);
  EXPECT_EQ(ef.Momentum(0), std::vector<float>(n, 0.0f));
  EXPECT_EQ(ef.Carried(0), std::vector<float>(n, 0.0f));
}

// Reset drops the carried error (a step redone, a rollback); a gradient
// that is not finite goes out to be refused and drops the chunk's error.
TEST(CompressedErrorFeedback, ResetAndNonFiniteGradientsDropTheError) {
  CompressedErrorFeedback ef(v1::DTYPE_TOPK, 0.5);
  std::string bytes;
  const std::vector<float> g = {1, 2, 3, 4};
  ef.Encode(0, g.data(), 4, &bytes);
  EXPECT_EQ(ef.Carried(0), (std::vector<float>{1, 2, 0, 0}));
  ef.Reset();
  EXPECT_TRUE(ef.Carried(0).empty());
  ef.Encode(0, g.data(), 4, &bytes);
  const std::vector<float> bad = {std::numeric_limits<float>::quiet_NaN(), 0, 0,
                                  0};
  ef.Encode(0, bad.data(), 4, &bytes);
  std::vector<float> out(4);
  ASSERT_TRUE(DecodeTopK(bytes, 4, out.data()).ok());
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(ef.Carried(0), (std::vector<float>(4, 0.0f)));
}

}  // namespace
}  // namespace strata
