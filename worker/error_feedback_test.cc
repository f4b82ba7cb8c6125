// Bf16ErrorFeedback: what a run of pushes sums to, with and without it.
#include "worker/error_feedback.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/bf16.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

float RoundBf16(float x) { return Bf16ToFloat(FloatToBf16(x)); }

// A gradient of 1 + 2^-10 every step: bf16 (unit in the last place 2^-7
// at 1) rounds it to 1, so 128 plain pushes sum to 128 and lose 1/8. With
// the error carried, the sum stays within one rounding of 128.125.
TEST(Bf16ErrorFeedback, KeepsTheSumOfPushesWithinOneRoundingOfTheGradients) {
  constexpr int kSteps = 128;
  const float grad = 1.0f + std::ldexp(1.0f, -10);
  Bf16ErrorFeedback ef;
  double plain = 0, fed = 0, exact = 0;
  for (int t = 0; t < kSteps; ++t) {
    float g[2] = {grad, -grad};
    plain += RoundBf16(grad);
    ef.Apply(/*param=*/3, g, 2);
    EXPECT_EQ(g[0], RoundBf16(g[0])) << "step " << t << ": not a bf16 value";
    EXPECT_EQ(g[1], -g[0]);
    fed += g[0];
    exact += grad;
  }
  EXPECT_EQ(plain, kSteps);  // the bias error feedback removes
  EXPECT_NEAR(fed, exact, std::ldexp(1.0, -8));
}

// Below, at 1 bf16's unit in the last place (ulp) is 2^-7: 1 + 2^-9 is a
// quarter of it, 1 + 2^-8 half (a tie, rounded to the even 1).
TEST(Bf16ErrorFeedback, NonFiniteValuesPassAndCarryNothing) {
  Bf16ErrorFeedback ef;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float huge = std::numeric_limits<float>::max();  // rounds to inf
  float g[4] = {nan, huge, 1.0f + 3 * std::ldexp(1.0f, -9), 0.5f};
  ef.Apply(0, g, 4);
  EXPECT_TRUE(std::isnan(g[0]));
  EXPECT_EQ(g[1], huge);
  EXPECT_EQ(g[2], 1.0f + std::ldexp(1.0f, -7));  // carries -1/4 ulp
  EXPECT_EQ(g[3], 0.5f);
  // Clean where the last push was not finite; the error carried where it
  // was: 5/8 ulp alone rounds up, 5/8 - 1/4 down.
  const float five_eighths =
      1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -10);
  ASSERT_EQ(RoundBf16(five_eighths), 1.0f + std::ldexp(1.0f, -7));
  float next[4] = {0.25f, 0.25f, five_eighths, 0.5f};
  ef.Apply(0, next, 4);
  EXPECT_EQ(next[0], 0.25f);
  EXPECT_EQ(next[1], 0.25f);
  EXPECT_EQ(next[2], 1.0f);
  EXPECT_EQ(next[3], 0.5f);
}

TEST(Bf16ErrorFeedback, ResetDropsTheCarriedError) {
  const float half_ulp = 1.0f + std::ldexp(1.0f, -8);
  for (bool reset : {false, true}) {
    Bf16ErrorFeedback ef;
    float g[1] = {1.0f + std::ldexp(1.0f, -9)};  // carries +1/4 ulp
    ef.Apply(0, g, 1);
    ASSERT_EQ(g[0], 1.0f);
    if (reset) ef.Reset();
    float next[1] = {half_ulp};
    ef.Apply(0, next, 1);
    EXPECT_EQ(next[0], reset ? 1.0f : 1.0f + std::ldexp(1.0f, -7)) << reset;
  }
}

// Parameters longer than one chunk of the parallel loop, each with its own
// error.
TEST(Bf16ErrorFeedback, CarriesEachParametersErrorOnItsOwn) {
  const int64_t n = (int64_t{1} << 17) + 5;
  Bf16ErrorFeedback ef;
  std::vector<float> a(n, 1.0f + std::ldexp(1.0f, -9)), b(n, 3.0f);
  ef.Apply(0, a.data(), n);  // carries +1/4 ulp
  ef.Apply(1, b.data(), n);  // exact: carries nothing
  std::vector<float> a2(n, 1.0f + std::ldexp(1.0f, -8)), b2(a2);
  ef.Apply(0, a2.data(), n);
  ef.Apply(1, b2.data(), n);
  for (int64_t k : {int64_t{0}, n / 2, n - 1}) {
    EXPECT_EQ(a2[k], 1.0f + std::ldexp(1.0f, -7)) << k;  // 3/4 ulp: up
    EXPECT_EQ(b2[k], 1.0f) << k;                         // the tie: even
  }
}

}  // namespace
}  // namespace strata
