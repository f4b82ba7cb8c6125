#include "scheduler/consistency_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace strata {
namespace {

v1::ConsistencyAdvice Advice(const Consistency& mode, std::string reason) {
  v1::ConsistencyAdvice a;
  a.set_mode(mode.ToString());
  a.set_reason(std::move(reason));
  return a;
}

// The largest number of pushes the others make while one worker computes
// a step under ASP, each leasing the same units.
double AspStaleness(const std::vector<const v1::StepTimes*>& w) {
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    double pushes = 0;
    for (size_t j = 0; j < w.size(); ++j) {
      if (j != i) {
        pushes += w[i]->compute_s_per_sample() /
                  std::max(w[j]->compute_s_per_sample(), 1e-12);
      }
    }
    worst = std::max(worst, pushes);
  }
  return worst;
}

}  // namespace

v1::ConsistencyAdvice AdviseConsistency(const Consistency& current,
                                        const std::vector<v1::Member>& workers,
                                        int max_staleness, bool allow_asp) {
  std::vector<const v1::StepTimes*> measured;
  for (const v1::Member& m : workers) {
    if (m.step_times().steps() >= kMinSteps)
      measured.push_back(&m.step_times());
  }
  if (measured.size() < 2 || measured.size() < workers.size()) {
    return v1::ConsistencyAdvice();  // not enough measured
  }
  double spread = 0, wait = 0, idle = 0;
  for (const v1::StepTimes* t : measured) {
    spread = std::max(spread, t->jitter());
    wait += t->wait_fraction() / measured.size();
    idle += t->idle_fraction() / measured.size();  // at most its waits'
  }
  const Consistency bsp{Consistency::kBsp, 0};
  if (spread <= kSteadySpread) {
    return Advice(bsp, absl::StrFormat("steps are steady (largest spread "
                                       "%.0f%%): BSP's shares absorb the "
                                       "speed differences",
                                       100 * spread));
  }
  if (current.mode == Consistency::kBsp && idle <= kMaxBspIdle) {
    return Advice(
        bsp, absl::StrFormat("the workers wait %.0f%% of their steps, their "
                             "processors idle %.0f%% (the host's other work "
                             "uses the rest): within %.0f%%",
                             100 * wait, 100 * idle, 100 * kMaxBspIdle));
  }
  const double need = std::ceil(std::pow(spread / kSteadySpread, 2));
  if (need <= max_staleness) {
    return Advice({Consistency::kSsp, static_cast<int>(need)},
                  absl::StrFormat("a step time spreads %.0f%%: %d steps of "
                                  "slack average it to %.0f%%",
                                  100 * spread, static_cast<int>(need),
                                  100 * kSteadySpread));
  }
  const double asp = AspStaleness(measured);
  if (!allow_asp) {
    return Advice({Consistency::kSsp, max_staleness},
                  absl::StrFormat("a step time spreads %.0f%%, past what %d "
                                  "steps of slack absorb; the job allows no "
                                  "looser mode than SSP",
                                  100 * spread, max_staleness));
  }
  if (asp <= max_staleness) {
    return Advice({Consistency::kAsp, 0},
                  absl::StrFormat("a step time spreads %.0f%%, past what %d "
                                  "steps of slack absorb; ASP's staleness "
                                  "would be %.1f pushes",
                                  100 * spread, max_staleness, asp));
  }
  return Advice({Consistency::kSsp, max_staleness},
                absl::StrFormat("a step time spreads %.0f%%; ASP's staleness "
                                "would be %.1f pushes, past %d",
                                100 * spread, asp, max_staleness));
}

}  // namespace strata
