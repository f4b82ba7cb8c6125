#include "server/init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace strata {
namespace {

v1::InitSpec Spec(v1::InitSpec::Kind kind, float scale) {
  v1::InitSpec s;
  s.set_kind(kind);
  s.set_scale(scale);
  s.set_seed(1234);
  return s;
}

std::vector<float> Fill(const v1::InitSpec& spec, uint64_t chunk, size_t n) {
  std::vector<float> w(n, -7.0f);
  FillInit(spec, chunk, w.data(), n);
  return w;
}

// Element i is a function of (seed, chunk, i): the same whatever the
// chunk's length, so every server and every run starts from the same
// weights.
TEST(FillInit, ValuesDependOnTheElementAlone) {
  for (v1::InitSpec::Kind kind :
       {v1::InitSpec::NORMAL, v1::InitSpec::UNIFORM}) {
    const v1::InitSpec spec = Spec(kind, 0.02f);
    const std::vector<float> whole = Fill(spec, 9, 3 * 65536 + 5);
    const std::vector<float> prefix = Fill(spec, 9, 1000);
    EXPECT_EQ(prefix, std::vector<float>(whole.begin(), whole.begin() + 1000));
    EXPECT_EQ(Fill(spec, 9, 1000), prefix);   // and in every run
    EXPECT_NE(Fill(spec, 10, 1000), prefix);  // another chunk, other values
  }
}

TEST(FillInit, NormalAndUniformHaveTheirScale) {
  const size_t n = 200000;
  const std::vector<float> normal =
      Fill(Spec(v1::InitSpec::NORMAL, 0.5f), 3, n);
  double sum = 0, sq = 0;
  for (float x : normal) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += double{x} * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n), 0.5, 0.01);
  const std::vector<float> uniform =
      Fill(Spec(v1::InitSpec::UNIFORM, 0.5f), 3, n);
  float lo = 1, hi = -1;
  for (float x : uniform) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_GE(lo, -0.5f);
  EXPECT_LE(hi, 0.5f);
  EXPECT_LT(lo, -0.49f);
  EXPECT_GT(hi, 0.49f);
}

TEST(FillInit, ConstantsFillEveryElement) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{65536 * 2 + 3}}) {
    EXPECT_EQ(Fill(Spec(v1::InitSpec::ONES, 0), 1, n),
              std::vector<float>(n, 1.0f));
    EXPECT_EQ(Fill(Spec(v1::InitSpec::CONSTANT, 0.25f), 1, n),
              std::vector<float>(n, 0.25f));
    EXPECT_EQ(Fill(Spec(v1::InitSpec::ZEROS, 0), 1, n),
              std::vector<float>(n, 0.0f));
  }
}

}  // namespace
}  // namespace strata
