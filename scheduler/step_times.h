// A worker's recent step times, as its heartbeats report them
// (HeartbeatRequest.steps): checked, kept for the last kWindow steps, and
// summarized into the Member.step_times that every view carries (`strata
// status` prints them). What a straggler looks like from the scheduler:
// a slow worker has a high time per sample (BSP's speed-weighted shares
// give it fewer samples), a jittering one a high spread (which shares
// cannot absorb), and the others then wait at the BSP gate.
#ifndef STRATA_SCHEDULER_STEP_TIMES_H_
#define STRATA_SCHEDULER_STEP_TIMES_H_

#include <deque>

#include "absl/status/status.h"
#include "google/protobuf/repeated_field.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/scheduler.pb.h"

namespace strata {

class StepTimes {
 public:
  static constexpr int kWindow = 16;
  static constexpr int kMaxPerHeartbeat = 64;

  // INVALID_ARGUMENT for more than kMaxPerHeartbeat timings, a negative
  // step, no samples or more than 2^40, or times that are not finite or
  // are negative or above a day.
  static absl::Status Validate(
      const google::protobuf::RepeatedPtrField<v1::StepTiming>& steps);

  // Adds validated timings: a step reported again (a redo) replaces its
  // earlier timing.
  void Add(const google::protobuf::RepeatedPtrField<v1::StepTiming>& steps);

  // The summary of the window; steps == 0 when it is empty.
  v1::StepTimes Summary() const;

 private:
  std::deque<v1::StepTiming> window_;  // in report order, at most kWindow
};

}  // namespace strata

#endif  // STRATA_SCHEDULER_STEP_TIMES_H_
