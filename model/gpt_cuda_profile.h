// Device time per op class of GptCuda's steps (gpu_train_bench --profile),
// from CUDA events recorded around each enqueued op: where the time goes,
// without a profiler. Private to model/gpt_cuda*.cc. Built only with
// STRATA_CUDA.
#ifndef STRATA_MODEL_GPT_CUDA_PROFILE_H_
#define STRATA_MODEL_GPT_CUDA_PROFILE_H_

#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::gpt_cuda {

// Records a pair of events around each op on one stream and sums their
// elapsed times per name. Not thread-safe (GptCuda's one caller).
class OpProfiler {
 public:
  explicit OpProfiler(cudaStream_t stream) : stream_(stream) {}
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Runs `enqueue` (which enqueues work on the stream) between two events
  // recorded under `name`, a string literal (its address is kept). Returns
  // what `enqueue` returns, or INTERNAL if an event fails.
  absl::Status Time(const char* name,
                    absl::FunctionRef<absl::Status()> enqueue);

  // Adds the elapsed times of every op timed since the last call to the
  // sums and frees their events for reuse. REQUIRES: the stream has
  // completed them (the caller synchronized).
  absl::Status Collect();

  // The sums, in ms, per name in first-seen order; clears them.
  std::vector<std::pair<std::string, double>> Take();

 private:
  struct Mark {
    const char* name;
    cudaEvent_t start, end;
  };
  absl::StatusOr<cudaEvent_t> NextEvent();

  cudaStream_t stream_;
  std::vector<cudaEvent_t> pool_;  // created events; the first used_ in use
  size_t used_ = 0;
  std::vector<Mark> marks_;
  std::vector<std::pair<std::string, double>> totals_;
};

}  // namespace strata::gpt_cuda

#endif  // STRATA_MODEL_GPT_CUDA_PROFILE_H_
