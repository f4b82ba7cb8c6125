#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace strata {
namespace {

thread_local bool in_parallel_region = false;

// Chunks per thread: enough that a thread slowed down by another process
// leaves its share to the others, few enough that per-chunk work stays
// large.
constexpr int kChunksPerThread = 4;

// A fixed set of helper threads; the calling thread takes part in its own
// jobs. Helpers sleep on a condition variable between jobs (no spinning, so
// other processes keep the cores).
class Pool {
 public:
  Pool() : max_threads_(std::max(1u, std::thread::hardware_concurrency())) {
    threads_ = max_threads_;
    for (int i = 1; i < max_threads_; ++i) {
      helpers_.emplace_back([this, i] { HelperLoop(i); });
    }
  }

  int threads() const { return threads_; }
  void set_threads(int n) { threads_ = std::clamp(n, 1, max_threads_); }

  // Runs chunks [0, chunks) of `fn` on the caller and the helpers, each
  // claiming the next unclaimed chunk until none is left (so a thread that
  // another process slows down takes fewer chunks); returns when all have
  // finished.
  void Run(int chunks, absl::FunctionRef<void(int)> fn) {
    absl::MutexLock call_lock(&call_mu_);
    // A helper may pick the job up after it is done; the shared Job keeps
    // its counters alive, and its exhausted `next` stops it from calling fn.
    auto job = std::make_shared<Job>(fn, chunks);
    {
      absl::MutexLock lock(&mu_);
      job_ = job;
      helpers_wanted_ = std::min(threads_, chunks) - 1;
      ++generation_;
    }
    work_cv_.SignalAll();
    in_parallel_region = true;
    RunChunks(*job);
    in_parallel_region = false;
    absl::MutexLock lock(&mu_);
    while (job->finished != chunks) done_cv_.Wait(&mu_);
    job_.reset();
  }

 private:
  struct Job {
    Job(absl::FunctionRef<void(int)> f, int n) : fn(f), chunks(n) {}
    absl::FunctionRef<void(int)> fn;
    const int chunks;
    std::atomic<int> next{0};
    int finished = 0;  // guarded by Pool::mu_
  };

  // Claims and runs chunks of `job` until none is left.
  void RunChunks(Job& job) {
    int ran = 0;
    for (int c = job.next++; c < job.chunks; c = job.next++) {
      job.fn(c);
      ++ran;
    }
    if (ran == 0) return;
    absl::MutexLock lock(&mu_);
    job.finished += ran;
    if (job.finished == job.chunks) done_cv_.Signal();
  }

  void HelperLoop(int index) {
    in_parallel_region = true;
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        absl::MutexLock lock(&mu_);
        while (generation_ == seen) work_cv_.Wait(&mu_);
        seen = generation_;
        if (index > helpers_wanted_ || job_ == nullptr) continue;
        job = job_;
      }
      RunChunks(*job);
    }
  }

  const int max_threads_;
  int threads_;
  absl::Mutex call_mu_;  // one job at a time
  absl::Mutex mu_;
  absl::CondVar work_cv_;  // a new job (generation_ bumped)
  absl::CondVar done_cv_;  // a job's last chunk finished
  std::shared_ptr<Job> job_ ABSL_GUARDED_BY(mu_);  // the current job
  int helpers_wanted_ ABSL_GUARDED_BY(mu_) = 0;    // helpers 1..this join it
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;   // bumped per job
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
  const int64_t by_grain = std::max<int64_t>(1, n / grain);
  const int threads = NumThreads();
  const int64_t most = threads == 1 ? 1 : int64_t{kChunksPerThread} * threads;
  return static_cast<int>(std::min(most, by_grain));
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

}  // namespace strata
