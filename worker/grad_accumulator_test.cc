#include "worker/grad_accumulator.h"

#include <gtest/gtest.h>

#include <numeric>

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
}

}  // namespace
}  // namespace strata
