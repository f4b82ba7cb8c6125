// The rule that picks a job's consistency from what its workers' steps
// measure (Member.step_times, scheduler/step_times.h). The scheduler puts
// its choice in every view as an advice (View.consistency_advice, shown by
// `strata status`). A job with a fixed setting keeps it; under
// --consistency auto the scheduler takes an advice that held
// (scheduler/consistency_switcher.h).
//
// The rule, over each worker's last steps (at least kMinSteps each, from
// at least two workers; else no advice):
//   1. Every worker's spread of time per sample at most kSteadySpread:
//      BSP. Its speed-weighted shares absorb steady speed differences.
//   2. A current BSP job whose workers' processors sit idle, while the
//      workers wait for the weights, at most kMaxBspIdle of their steps
//      (StepTimes.idle_fraction): BSP. The shares absorb what varies, and
//      a wait whose processors the host's other work uses (CPU workers
//      sharing cores) is no time an asynchronous mode could win back.
//      The bar is not lower because an asynchronous update is worth less
//      than a BSP step's (docs/ARCHITECTURE.md, "Stragglers").
//   3. Else SSP(s) with the least s that averages the largest spread J
//      down to kSteadySpread over s steps of slack: s = ceil((J /
//      kSteadySpread)^2), at most max_staleness.
//   4. Where that s is above max_staleness: ASP if the staleness ASP would
//      give each worker's pushes (the pushes the others make while it
//      computes one step: the sum over the others of its time per sample
//      over theirs) stays within max_staleness and the job allows ASP
//      (auto:<s>:ssp does not); else SSP(max_staleness).
#ifndef STRATA_SCHEDULER_CONSISTENCY_POLICY_H_
#define STRATA_SCHEDULER_CONSISTENCY_POLICY_H_

#include <vector>

#include "common/consistency.h"
#include "strata/v1/common.pb.h"

namespace strata {

inline constexpr int kMinSteps = 8;
inline constexpr double kSteadySpread = 0.15;
inline constexpr double kMaxBspIdle = 0.20;
inline constexpr int kDefaultMaxStaleness =
    AutoConsistency::kDefaultMaxStaleness;

// The rule above for a job now in `current`, with its live workers.
// `max_staleness` >= 1; `allow_asp` false: never ASP (rule 4).
v1::ConsistencyAdvice AdviseConsistency(const Consistency& current,
                                        const std::vector<v1::Member>& workers,
                                        int max_staleness,
                                        bool allow_asp = true);

}  // namespace strata

#endif  // STRATA_SCHEDULER_CONSISTENCY_POLICY_H_
