// A plain read of an array: the limit of a pass that reads every byte once
// (a norm, a checksum) from wherever the array is (a cache, or memory for
// arrays larger than the caches), measured in the same run.
#ifndef STRATA_BENCH_READ_PASS_H_
#define STRATA_BENCH_READ_PASS_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace strata::bench {

// The best rate, in bytes per second, of `reps` runs of `pass` over
// `bytes` bytes.
template <typename F>
double BestBytesPerSecond(size_t bytes, int reps, F pass) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    best = std::max(best, bytes / s);
  }
  return best;
}

// Reads every word: an XOR over 64-bit words in independent lanes, which
// vectorizes and leaves the memory as the only limit.
uint64_t XorWords(const uint64_t* w, int64_t n);

}  // namespace strata::bench

#endif  // STRATA_BENCH_READ_PASS_H_
