// A shard's consistency gates: the one for the mode the job runs now, and
// those it ran before (--consistency auto switches the mode live). A gate
// keeps no state of its own (it is in the chunks), so a request that took
// a gate before a switch finishes under it; the gates live as long as the
// shard, so such a reference stays valid.
#ifndef STRATA_SERVER_GATE_SET_H_
#define STRATA_SERVER_GATE_SET_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/consistency.h"
#include "server/consistency_gate.h"

namespace strata {

// Thread-safe.
class GateSet {
 public:
  GateSet(GateParts parts, const Consistency& mode);

  // The gate of the mode the job runs now.
  ConsistencyGate& Current() const {
    return *current_.load(std::memory_order_acquire);
  }
  Consistency mode() const;

  // The gate of `mode`, made if need be (not made current).
  ConsistencyGate& Get(const Consistency& mode);
  // Makes `to`'s gate the current one. The caller has had every chunk
  // Adopt()ed by it first (Shard::UpdateView).
  void SwitchTo(const Consistency& to);

 private:
  ConsistencyGate& GetLocked(const Consistency& mode)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const GateParts parts_;
  mutable absl::Mutex mu_;
  Consistency mode_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::unique_ptr<ConsistencyGate>>> gates_
      ABSL_GUARDED_BY(mu_);
  std::atomic<ConsistencyGate*> current_;
};

}  // namespace strata

#endif  // STRATA_SERVER_GATE_SET_H_
