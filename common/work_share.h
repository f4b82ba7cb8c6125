// How a step's global batch is split among workers: step t covers global
// samples [t*G, (t+1)*G); the worker of rank r among W takes a contiguous
// share, the first G % W workers one sample more. Ranks follow member ids, the
// order servers sum BSP pushes in.
#ifndef STRATA_COMMON_WORK_SHARE_H_
#define STRATA_COMMON_WORK_SHARE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/v1/common.pb.h"

namespace strata {

struct Share {
  int64_t first = 0;  // global sample index
  int64_t count = 0;
};

// REQUIRES: 0 <= rank < workers, batch >= workers.
inline Share ShareOf(int64_t step, int64_t batch, int rank, int workers) {
  const int64_t base = batch / workers, extra = batch % workers;
  Share s;
  s.count = base + (rank < extra ? 1 : 0);
  s.first = step * batch + rank * base + std::min<int64_t>(rank, extra);
  return s;
}

// A worker's rank: its position among the view's live workers by member id
// (the order servers sum BSP pushes in). FAILED_PRECONDITION if `member` is
// not a live worker of `view`.
inline absl::StatusOr<int> RankOf(const v1::View& view, uint64_t member) {
  std::vector<uint64_t> ids;
  for (const auto& w : view.workers()) ids.push_back(w.id());
  std::sort(ids.begin(), ids.end());
  auto it = std::find(ids.begin(), ids.end(), member);
  if (it == ids.end()) {
    return absl::FailedPreconditionError(
        "this worker is not a live worker of the view");
  }
  return static_cast<int>(it - ids.begin());
}

}  // namespace strata

#endif  // STRATA_COMMON_WORK_SHARE_H_
