// A run of samples, and a worker's rank among the view's live workers.
// Which samples each worker computes is the data ledger's to say
// (scheduler/ledger.h); ranks follow member ids, the order servers sum BSP
// pushes in and the ledger splits a step in.
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
