#include "kernels/parallel.h"

#include <cblas.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::kernels {
namespace {

thread_local bool in_parallel_region = false;

// A fixed set of helper threads; the calling thread runs chunk 0 itself.
// Helpers sleep on a condition variable between jobs (no spinning, so GEMM
// threads and other processes keep the cores).
class Pool {
 public:
  Pool() : max_threads_(std::max(1u, std::thread::hardware_concurrency())) {
    // GEMMs are split over this pool; OpenBLAS runs each piece on one thread.
    openblas_set_num_threads(1);
    threads_ = max_threads_;
    for (int i = 1; i < max_threads_; ++i) {
      helpers_.emplace_back([this, i] { HelperLoop(i); });
    }
  }

  int threads() const { return threads_; }
  void set_threads(int n) { threads_ = std::clamp(n, 1, max_threads_); }

  // Runs chunks [0, chunks) of `job`; returns when all have finished.
  void Run(int chunks, absl::FunctionRef<void(int)> job) {
    std::lock_guard<std::mutex> call_lock(call_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      chunks_ = chunks;
      pending_ = chunks - 1;
      ++generation_;
    }
    work_cv_.notify_all();
    in_parallel_region = true;
    job(0);
    in_parallel_region = false;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void HelperLoop(int index) {
    in_parallel_region = true;
    uint64_t seen = 0;
    for (;;) {
      absl::FunctionRef<void(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (index >= chunks_) continue;
        job = job_;
      }
      (*job)(index);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  const int max_threads_;
  int threads_;
  std::mutex call_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  absl::FunctionRef<void(int)>* job_ = nullptr;
  int chunks_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::thread> helpers_;  // never joined: the pool lives forever
};

Pool& SharedPool() {
  static Pool* pool = new Pool();
  return *pool;
}

}  // namespace

bool InParallelRegion() { return in_parallel_region; }

int NumThreads() { return SharedPool().threads(); }

void SetNumThreads(int n) { SharedPool().set_threads(n); }

int NumChunks(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  int64_t by_grain = std::max<int64_t>(1, n / grain);
  return static_cast<int>(std::min<int64_t>(NumThreads(), by_grain));
}

void ParallelFor(int64_t n, int64_t grain,
                 absl::FunctionRef<void(int, int64_t, int64_t)> fn) {
  const int chunks = NumChunks(n, grain);
  if (chunks == 0) return;
  auto range = [&](int c) {
    int64_t begin = n * c / chunks;
    int64_t end = n * (c + 1) / chunks;
    fn(c, begin, end);
  };
  if (chunks == 1 || in_parallel_region) {
    for (int c = 0; c < chunks; ++c) range(c);
    return;
  }
  SharedPool().Run(chunks, range);
}

}  // namespace strata::kernels
