// --consistency auto: when the scheduler switches the job's consistency.
// The rule (scheduler/consistency_policy.h) advises a mode in every view;
// the switcher takes an advice only once it has held, so one noisy window
// of step times does not flip the job back and forth:
//  - not while a switch is under way, nor until the slowest worker is
//    kSettleSteps past the last switch (its step times, kept over its last
//    16 steps, then come from the mode it runs now);
//  - the advice must differ from the mode the job runs while the slowest
//    worker goes kHoldSteps steps (no advice, or the job's own mode, start
//    the hold over); then the advice of that moment is taken. An advice
//    that moves between two other modes on the same side of the job's
//    (near a boundary of the rule, as ASP's staleness against the cap)
//    holds: each is better than the job's mode by the rule;
//  - an advice tighter than the job's mode (BSP, then SSP by its bound,
//    then ASP) must stay tighter for twice as long (kTightenHoldSteps; an
//    advice that turns from looser to tighter, or back, starts the hold
//    over), so an advice moving between two modes near a boundary of the
//    rule flips the job at most once per kSettleSteps + kHoldSteps of the
//    slowest worker's steps, and back only kSettleSteps +
//    kTightenHoldSteps after. The step of a switch between asynchronous
//    modes is one past the largest clock leased then (the ledger's), so
//    the next one waits for the slowest worker's drift as well as its
//    kSettleSteps (lifts do not change the clocks the view carries);
//  - an advice of BSP for an SSP/ASP job is tighter: it holds
//    kTightenHoldSteps like any other;
//  - BSP's waits cannot be measured while the job runs asynchronously
//    (rule 2 of scheduler/consistency_policy.h weighs them), so an SSP/ASP
//    job tries BSP again once its slowest worker is ProbeSteps past the
//    last switch: kProbeSteps, doubled for each switch back to BSP the view
//    lists (at most kMaxProbeDoublings times), so a job whose stragglers
//    keep BSP's waits high tries it less and less often. A probe needs no
//    hold: the rule decides on BSP's own waits after it settles;
//  - sooner when what made BSP wait went away: once settled, a straggler
//    of the moment the job left BSP (a time per sample kSpeedChange times
//    the median of the other workers' or more) that left the job, or
//    whose time per sample against the others' fell by kSpeedChange or
//    more since, has the job try BSP at once. Only a recovery counts: a
//    worker that slowed is no sign BSP would wait less. Each such probe
//    follows a recovery, so a worker slow on and off moves the job with
//    it, at most once per kSettleSteps + kHoldSteps + kSettleSteps of the
//    slowest worker's steps. Kept in the switcher only: a restarted
//    scheduler probes on the timer alone.
// Not thread-safe: the scheduler's lease loop calls it.
#ifndef STRATA_SCHEDULER_CONSISTENCY_SWITCHER_H_
#define STRATA_SCHEDULER_CONSISTENCY_SWITCHER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/consistency.h"
#include "strata/v1/common.pb.h"

namespace strata::scheduler_internal {

inline constexpr int64_t kSettleSteps = 16;
inline constexpr int64_t kHoldSteps = 8;
inline constexpr int64_t kTightenHoldSteps = 2 * kHoldSteps;
inline constexpr int64_t kProbeSteps = 48;
inline constexpr int kMaxProbeDoublings = 3;
inline constexpr double kSpeedChange = 2.0;

// The slowest worker's steps after a switch from which an SSP/ASP job,
// seen in `view`, tries BSP again.
int64_t ProbeSteps(const v1::View& view);

struct SwitchDecision {
  Consistency to;
  std::string reason;
};

class ConsistencySwitcher {
 public:
  // What the job should switch to, seen `view` (its advice, mode,
  // switches and workers' clocks), or nullopt.
  std::optional<SwitchDecision> Decide(const v1::View& view);
  // The ledger refused the last decision (every sample handed out, say):
  // none until the slowest worker in `view` goes kHoldSteps more.
  void Refused(const v1::View& view);

 private:
  // A probe's reason when a worker's relative speed moved since the job
  // left BSP (left_ratio_), else "".
  std::string SpeedsChanged(const v1::View& view) const;

  int64_t quiet_until_ = 0;  // no decision before the slowest is here
  // Each worker's time per sample over the median when the job left BSP.
  std::map<uint64_t, double> left_ratio_;
  bool holding_ = false;  // the advice differs from the job's mode
  bool tighter_ = false;  // ...and is tighter than it
  int64_t since_ = 0;     // the slowest worker's step when it began to
};

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_CONSISTENCY_SWITCHER_H_
