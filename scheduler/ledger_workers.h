// The live workers of a view as the ledger reads them. Private to
// scheduler/ledger*.cc.
#ifndef STRATA_SCHEDULER_LEDGER_WORKERS_H_
#define STRATA_SCHEDULER_LEDGER_WORKERS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "strata/v1/common.pb.h"

namespace strata::scheduler_internal {

// The live workers of `view`, by rising member id.
inline std::vector<const v1::Member*> Workers(const v1::View& view) {
  std::vector<const v1::Member*> w;
  for (const v1::Member& m : view.workers()) w.push_back(&m);
  std::sort(w.begin(), w.end(), [](const v1::Member* a, const v1::Member* b) {
    return a->id() < b->id();
  });
  return w;
}

inline const v1::Member* FindWorker(
    const std::vector<const v1::Member*>& workers, uint64_t id) {
  for (const v1::Member* m : workers)
    if (m->id() == id) return m;
  return nullptr;
}

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_LEDGER_WORKERS_H_
