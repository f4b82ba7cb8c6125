#include "scheduler/consistency_switcher.h"

#include <algorithm>
#include <limits>
#include <string>

namespace strata::scheduler_internal {
namespace {

// Whether the mode named `b` lets workers drift further than the one named
// `a` (names that do not parse do not).
bool Looser(const std::string& b, const std::string& a) {
  absl::StatusOr<Consistency> cb = ParseConsistency(b);
  absl::StatusOr<Consistency> ca = ParseConsistency(a);
  return cb.ok() && ca.ok() && strata::Looser(*cb, *ca);
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
                      !advice.empty() && Looser(advice, view.consistency());
  if (!usable) {
    holding_ = false;
    return std::nullopt;
  }
  if (!holding_) {
    holding_ = true;
    since_ = slowest;
    return std::nullopt;
  }
  if (slowest < since_ + kHoldSteps) return std::nullopt;
  absl::StatusOr<Consistency> to = ParseConsistency(advice);
  if (!to.ok()) return std::nullopt;
  holding_ = false;
  return SwitchDecision{*to, view.consistency_advice().reason()};
}

}  // namespace strata::scheduler_internal
