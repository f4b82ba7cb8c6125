#include "scheduler/consistency_switcher.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::scheduler_internal {
namespace {

// Whether a job in the mode named `from` can switch to the one named `to`:
// another mode. Names that do not parse cannot.
bool Reachable(const std::string& to, const std::string& from) {
  absl::StatusOr<Consistency> t = ParseConsistency(to);
  absl::StatusOr<Consistency> f = ParseConsistency(from);
  return t.ok() && f.ok() && t->ToString() != f->ToString();
}

}  // namespace

int64_t ProbeSteps(const v1::View& view) {
  int back = 0;
  for (const v1::ConsistencySwitch& sw : view.consistency_switches())
    back += sw.to() == "bsp" ? 1 : 0;
  return kProbeSteps << std::min(back, kMaxProbeDoublings);
}

namespace {

// Each measured worker's time per sample over the median of the other
// measured workers' (with two workers, the other's).
std::map<uint64_t, double> SpeedRatios(const v1::View& view) {
  std::map<uint64_t, double> times;
  for (const v1::Member& w : view.workers()) {
    if (w.step_times().steps() > 0 && w.step_times().compute_s_per_sample() > 0)
      times[w.id()] = w.step_times().compute_s_per_sample();
  }
  std::map<uint64_t, double> out;
  for (const auto& [id, t] : times) {
    std::vector<double> others;
    for (const auto& [other, u] : times) {
      if (other != id) others.push_back(u);
    }
    if (others.empty()) continue;
    std::sort(others.begin(), others.end());
    const size_t n = others.size();
    out[id] = t / ((others[(n - 1) / 2] + others[n / 2]) / 2);
  }
  return out;
}

int64_t Slowest(const v1::View& view) {
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (const v1::Member& w : view.workers())
    slowest = std::min(slowest, w.clock());
  return slowest;
}

}  // namespace

std::string ConsistencySwitcher::SpeedsChanged(const v1::View& view) const {
  const std::map<uint64_t, double> now = SpeedRatios(view);
  for (const auto& [id, before] : left_ratio_) {
    if (before < kSpeedChange) continue;  // not a straggler then
    bool live = false;
    for (const v1::Member& w : view.workers()) live = live || w.id() == id;
    if (!live) {
      return absl::StrFormat(
          "worker %d, %.2fx the others' time per sample when the job left "
          "BSP, left the job",
          id, before);
    }
    auto it = now.find(id);
    if (it != now.end() && before / it->second >= kSpeedChange) {
      return absl::StrFormat(
          "worker %d ran %.2fx the others' time per sample when the job "
          "left BSP, %.2fx now",
          id, before, it->second);
    }
  }
  return "";
}

void ConsistencySwitcher::Refused(const v1::View& view) {
  holding_ = false;
  if (!view.workers().empty()) quiet_until_ = Slowest(view) + kHoldSteps;
}

std::optional<SwitchDecision> ConsistencySwitcher::Decide(
    const v1::View& view) {
  const int64_t slowest = Slowest(view);
  if (slowest < quiet_until_) return std::nullopt;
  const int64_t last_switch =
      view.consistency_switches().empty()
          ? 0
          : view.consistency_switches().rbegin()->step();
  const std::string& advice = view.consistency_advice().mode();
  const bool settled = !view.workers().empty() &&
                       !view.has_consistency_pending() &&
                       slowest >= last_switch + kSettleSteps;
  // (A job that left BSP lists the switch; one listing none never ran BSP.)
  if (settled && view.consistency() != "bsp" &&
      !view.consistency_switches().empty()) {
    std::string why = SpeedsChanged(view);
    if (why.empty() && slowest >= last_switch + ProbeSteps(view)) {
      why = absl::StrFormat("%d steps in %s", slowest - last_switch,
                            view.consistency());
    }
    if (!why.empty()) {
      holding_ = false;
      left_ratio_.clear();
      return SwitchDecision{
          Consistency(),
          absl::StrCat("probing BSP (", why,
                       "): its waits cannot be measured asynchronously")};
    }
  }
  const bool usable =
      settled && !advice.empty() && Reachable(advice, view.consistency());
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
  if (view.consistency() == "bsp") left_ratio_ = SpeedRatios(view);
  return SwitchDecision{to, view.consistency_advice().reason()};
}

}  // namespace strata::scheduler_internal
