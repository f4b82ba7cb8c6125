#include "scheduler/consistency_switcher.h"

#include <algorithm>
#include <limits>
#include <string>

namespace strata::scheduler_internal {
namespace {

// Whether a job in the mode named `from` can switch to the one named `to`:
// another mode, not back to BSP (not built: scheduler/ledger.h
// BeginSwitch). Names that do not parse cannot.
bool Reachable(const std::string& to, const std::string& from) {
  absl::StatusOr<Consistency> t = ParseConsistency(to);
  absl::StatusOr<Consistency> f = ParseConsistency(from);
  return t.ok() && f.ok() && t->ToString() != f->ToString() &&
         t->mode != Consistency::kBsp;
}

}  // namespace

std::optional<SwitchDecision> ConsistencySwitcher::Decide(
    const v1::View& view) {
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (const v1::Member& w : view.workers())
    slowest = std::min(slowest, w.clock());
  const int64_t last_switch =
      view.consistency_switches().empty()
          ? 0
          : view.consistency_switches().rbegin()->step();
  const std::string& advice = view.consistency_advice().mode();
  const bool usable = !view.workers().empty() &&
                      !view.has_consistency_pending() &&
                      slowest >= last_switch + kSettleSteps &&
                      !advice.empty() && Reachable(advice, view.consistency());
  if (!usable) {
    holding_ = false;
    return std::nullopt;
  }
  // Reachable parsed both.
  const Consistency to = *ParseConsistency(advice);
  const bool tighter = !Looser(to, *ParseConsistency(view.consistency()));
  if (!holding_ || tighter != tighter_) {
    // A hold starts, or the advice turned the other way: it starts over.
    holding_ = true;
    tighter_ = tighter;
    since_ = slowest;
    return std::nullopt;
  }
  if (slowest < since_ + (tighter ? kTightenHoldSteps : kHoldSteps))
    return std::nullopt;
  holding_ = false;
  return SwitchDecision{to, view.consistency_advice().reason()};
}

}  // namespace strata::scheduler_internal
