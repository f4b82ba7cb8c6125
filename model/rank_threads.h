// Runs one step of a model split over ranks that are threads of this
// process (model/gpt_parallel.h, model/gpt_expert_parallel.h).
#ifndef STRATA_MODEL_RANK_THREADS_H_
#define STRATA_MODEL_RANK_THREADS_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace strata {

// Runs fn(r) for every r in [0, ranks) on a thread each and waits for all.
// A rank whose fn fails then calls on_failure(r) on its own thread (to
// abort its communicators: the ranks waiting on it stop at once). Returns
// OK, or the cause of a failure: the first error that is not UNAVAILABLE
// (the others' report of the abort that followed it), else the first.
inline absl::Status RunOnRankThreads(
    int ranks, const std::function<absl::Status(int)>& fn,
    const std::function<void(int)>& on_failure) {
  std::vector<absl::Status> status(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      status[r] = fn(r);
      if (!status[r].ok()) on_failure(r);
    });
  }
  for (std::thread& t : threads) t.join();
  absl::Status failed;
  for (const absl::Status& s : status) {
    if (!s.ok() && (failed.ok() || absl::IsUnavailable(failed))) failed = s;
  }
  return failed;
}

}  // namespace strata

#endif  // STRATA_MODEL_RANK_THREADS_H_
