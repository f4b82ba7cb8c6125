// The best time of a benchmark's repeated runs. Header-only.
#ifndef STRATA_BENCH_BEST_SECONDS_H_
#define STRATA_BENCH_BEST_SECONDS_H_

#include <algorithm>
#include <chrono>

namespace strata::bench {

// Runs f once as a warm-up, then `reps` times; the fastest of those, in
// seconds.
template <typename F>
double BestSeconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (r > 0) best = std::min(best, s);
  }
  return best;
}

}  // namespace strata::bench

#endif  // STRATA_BENCH_BEST_SECONDS_H_
