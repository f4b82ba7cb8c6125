#include "server/gradient_pool.h"

#include <utility>

namespace strata {

std::vector<float> GradientPool::Take(size_t n) {
  std::vector<float> buffer;
  {
    absl::MutexLock lock(&mu_);
    // At most twice the size: a small chunk's push that took a large
    // buffer would make the next large one allocate, and the pool, which
    // frees nothing, would grow past the peak it exists to keep.
    if (auto it = pool_.lower_bound(n);
        it != pool_.end() && it->first <= 2 * n) {
      buffer = std::move(it->second);
      pool_.erase(it);
    }
  }
  buffer.resize(n);
  return buffer;
}

void GradientPool::Give(std::vector<float> buffer) {
  if (buffer.capacity() == 0) return;
  absl::MutexLock lock(&mu_);
  if (capped_ && pool_.size() >= kCappedBuffers) return;
  const size_t capacity = buffer.capacity();
  pool_.emplace(capacity, std::move(buffer));
}

}  // namespace strata
