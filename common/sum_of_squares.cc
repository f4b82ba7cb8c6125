#include "common/sum_of_squares.h"

#include <vector>

#include "common/parallel.h"
#include "common/target_clones.h"

namespace strata {

namespace {

// The sum of squares of g[0..n) in kLanes running sums, one per position
// modulo kLanes, added pairwise at the end. One running sum would be a
// chain of dependent double adds, one element per add's latency (1.8-2.3x
// slower over 124M values: bench/grad_norm_bench); independent lanes
// vectorize and run near memory speed. The order
// of every add is fixed by the lanes, not by the vector width, and a float
// squared is exact in double (so a fused multiply-add rounds as the
// separate multiply and add do): every clone gives the same bits.
constexpr int kLanes = 16;

STRATA_CLONES double SumOfSquaresSerial(const float* g, int64_t n) {
  double lane[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double x = g[k + j];
      lane[j] += x * x;
    }
  }
  for (int j = 0; k < n; ++k, ++j) {
    const double x = g[k];
    lane[j] += x * x;
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
  }
  return lane[0];
}

}  // namespace

double SumOfSquares(const float* g, int64_t n) {
  constexpr int64_t kGrain = 1 << 16;
  std::vector<double> parts(NumChunks(n, kGrain), 0.0);
  ParallelFor(n, kGrain, [&](int chunk, int64_t begin, int64_t end) {
    parts[chunk] = SumOfSquaresSerial(g + begin, end - begin);
  });
  double sum = 0;
  for (double p : parts) sum += p;
  return sum;
}

}  // namespace strata
