#include "trainer/grad_accumulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace strata {
namespace {

TEST(GradAccumulator, SplitsRowsIntoPiecesAsEqualAsCanBe) {
  EXPECT_EQ(GradAccumulator::Split(4, 3), (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(GradAccumulator::Split(6, 3), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(GradAccumulator::Split(2, 5), (std::vector<int>{1, 1}));
  EXPECT_EQ(GradAccumulator::Split(7, 1), (std::vector<int>{7}));
  for (int rows = 1; rows < 40; ++rows) {
    for (int pieces = 1; pieces < 9; ++pieces) {
      const std::vector<int> s = GradAccumulator::Split(rows, pieces);
      EXPECT_EQ(std::accumulate(s.begin(), s.end(), 0), rows);
      EXPECT_EQ(static_cast<int>(s.size()), std::min(rows, pieces));
      EXPECT_LE(s.front() - s.back(), 1);
    }
  }
}

TEST(GradAccumulator, SumOfSquaresIsExactOnSmallIntegersAndReproducible) {
  std::vector<float> g(1 << 20);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 7) - 3;
  double want = 0;
  for (float x : g) want += static_cast<double>(x) * x;
  EXPECT_EQ(SumOfSquares(g.data(), g.size()), want);
  EXPECT_EQ(SumOfSquares(g.data(), 0), 0.0);
  // Lengths around the running sums' lanes and the parallel chunks.
  for (int64_t n : {1, 15, 16, 17, 33, 65535, 65537, 131075}) {
    double part = 0;
    for (int64_t k = 0; k < n; ++k) part += static_cast<double>(g[k]) * g[k];
    EXPECT_EQ(SumOfSquares(g.data(), n), part) << n;
  }
}

TEST(GradAccumulator, SumOfSquaresOfRealValuesIsCloseToTheExactSum) {
  std::vector<float> g(300007);
  uint32_t x = 12345;
  for (float& v : g) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(x)) * 1e-9f;
  }
  long double exact = 0;
  for (float v : g) exact += static_cast<long double>(v) * v;
  const double got = SumOfSquares(g.data(), static_cast<int64_t>(g.size()));
  EXPECT_NEAR(got, static_cast<double>(exact), 1e-12 * got);
  EXPECT_EQ(SumOfSquares(g.data(), static_cast<int64_t>(g.size())), got);
  g[4242] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(
      std::isnan(SumOfSquares(g.data(), static_cast<int64_t>(g.size()))));
}

}  // namespace
}  // namespace strata
