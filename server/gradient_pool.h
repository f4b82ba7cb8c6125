// Gradient buffers for reuse across pushes: a fresh multi-MiB allocation
// per push costs page faults that halve a server's throughput.
#ifndef STRATA_SERVER_GRADIENT_POOL_H_
#define STRATA_SERVER_GRADIENT_POOL_H_

#include <cstddef>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace strata {

// Thread-safe. Every buffer given back is kept, by capacity, unless the
// pool is capped: a shard with a RAM budget keeps at most kCappedBuffers,
// since memory kept there is memory over the budget. Freeing them instead
// costs the next step fresh pages: a deferred step holds a buffer per chunk
// at once, and memory glibc unmaps between steps (a thread arena's heap
// that became free) came back with a page fault and a zeroing for every
// 4 KiB, measured at about half the servers' CPU in a 124M step
// (docs/BENCHMARKS.md).
class GradientPool {
 public:
  static constexpr size_t kCappedBuffers = 64;

  explicit GradientPool(bool capped) : capped_(capped) {}

  // A buffer of `n` values (contents unspecified): the smallest kept one
  // that fits and is at most twice that size, or a new one.
  std::vector<float> Take(size_t n);
  // Keeps `buffer` for a later Take (or frees it when capped and full).
  void Give(std::vector<float> buffer);

 private:
  const bool capped_;
  absl::Mutex mu_;
  std::multimap<size_t, std::vector<float>> pool_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_GRADIENT_POOL_H_
