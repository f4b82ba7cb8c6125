#include "scheduler/rollback.h"

#include <algorithm>
#include <vector>

#include "scheduler/ledger.h"

namespace strata::scheduler_internal {

std::optional<int64_t> RollbackStep(const v1::RegisterRequest& req,
                                    const v1::View& after,
                                    const v1::LedgerState& ledger,
                                    const Consistency& mode) {
  const bool first = req.worker() == 0 && req.incarnation() == 0;
  if (req.role() != v1::ROLE_SERVER || !first ||
      mode.mode != Consistency::kBsp || !ledger.has_job()) {
    return std::nullopt;
  }
  const auto& slots = ledger.job().slots();
  auto in_job = [&slots](int slot) {
    return std::find(slots.begin(), slots.end(), slot) != slots.end();
  };
  if (!in_job(req.shard())) return std::nullopt;
  // A finished job keeps its final weights: its workers are gone.
  if (ledger.job().total_samples() > 0 &&
      BspFirstSample(ledger, ledger.applied_steps()) >=
          ledger.job().total_samples()) {
    return std::nullopt;
  }
  auto holds = [](const google::protobuf::RepeatedField<int64_t>& held,
                  int64_t step) {
    return step == 0 || std::find(held.begin(), held.end(), step) != held.end();
  };
  std::vector<int64_t> candidates(req.snapshots().begin(),
                                  req.snapshots().end());
  candidates.push_back(0);
  std::sort(candidates.rbegin(), candidates.rend());
  for (int64_t step : candidates) {
    if (step > ledger.applied_steps()) continue;
    bool everywhere = true;
    for (const v1::Member& s : after.servers()) {
      // A server catching up takes its state from its slot's primary.
      if (s.catching_up()) continue;
      if (in_job(s.shard()) && s.shard() != req.shard()) {
        everywhere = everywhere && holds(s.snapshots(), step);
      }
    }
    if (everywhere) return step;
  }
  return 0;  // unreachable: step 0 is a candidate held everywhere
}

}  // namespace strata::scheduler_internal
