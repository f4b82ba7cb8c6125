// A fixed set of threads running queued closures, first in first out: an
// executor for independent tasks (the server's RPC handlers, its snapshot
// writer). Blocked loops over data go through ParallelFor (parallel.h).
#ifndef STRATA_COMMON_THREAD_POOL_H_
#define STRATA_COMMON_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace strata {

// Thread-safe. The destructor runs every closure already queued, then joins.
class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~ThreadPool() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (auto& t : threads_) t.join();
  }
  void Schedule(std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(fn));
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
              return p->stopping_ || !p->queue_.empty();
            },
            this));
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata

#endif  // STRATA_COMMON_THREAD_POOL_H_
