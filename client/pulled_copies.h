// A worker's side of compressed pulls (PsClientOptions::pull_compress;
// the server's side and the protocol: server/pull_mirrors.h): the copy of
// each chunk the worker rebuilt from the server's deltas, and the sequence
// number that names it. A delta is added to the copy with the same float
// additions the server makes to its own, so the two stay bit-identical.
#ifndef STRATA_CLIENT_PULLED_COPIES_H_
#define STRATA_CLIENT_PULLED_COPIES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Thread-safe; calls for different chunks may run at once.
class PulledCopies {
 public:
  // The base a pull of `chunk` names (PullRequest.delta_base; 0: none).
  uint64_t Base(int chunk);
  // Applies the answer `resp` with `payload` to a pull of chunk `chunk`
  // (n elements) that asked for `asked` (ONEBIT or TOPK), then writes the
  // chunk's copy to dst[0, n). DATA_LOSS for a payload that is not what
  // the answer says; FAILED_PRECONDITION for a delta from another base
  // than the copy's (pulls of one chunk that overlapped). Either error
  // drops the copy, so the chunk's next pull gets the whole weights.
  absl::Status Apply(int chunk, size_t n, v1::DType asked,
                     const v1::PullResponse& resp, absl::string_view payload,
                     float* dst);
  // Drops every copy.
  void Reset();

 private:
  struct Copy {
    absl::Mutex mu;
    uint64_t seq ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> w ABSL_GUARDED_BY(mu);
  };
  Copy& Get(int chunk);
  // REQUIRES: c.mu held. Adds the delta in `payload` to c.w.
  absl::Status AddDelta(Copy& c, size_t n, v1::DType dtype,
                        absl::string_view payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

  absl::Mutex mu_;
  std::vector<std::unique_ptr<Copy>> copies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_CLIENT_PULLED_COPIES_H_
