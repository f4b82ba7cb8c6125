// The ledger's side of the live consistency switch (ledger.h): its fence,
// and the change from BSP steps to SSP/ASP leases.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "scheduler/ledger.h"
#include "spdlog/spdlog.h"

namespace strata::scheduler_internal {
namespace {

// The switches a ledger keeps (and the view shows).
constexpr int kKeptSwitches = 32;

void Keep(v1::LedgerState& s, const v1::ConsistencySwitch& done) {
  *s.add_switches() = done;
  if (s.switches_size() > kKeptSwitches) {
    s.mutable_switches()->DeleteSubrange(0, s.switches_size() - kKeptSwitches);
  }
}

}  // namespace

absl::StatusOr<v1::ConsistencySwitch> Ledger::BeginSwitch(const Consistency& to,
                                                          std::string reason,
                                                          int64_t unix_ms) {
  STRATA_RETURN_IF_ERROR(ValidateConsistency(to));
  absl::MutexLock lock(&mu_);
  if (state_.has_pending_switch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ledger: a switch to ", state_.pending_switch().to(), " at step ",
        state_.pending_switch().step(), " is under way"));
  }
  if (to.ToString() == mode_.ToString()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ledger: the job runs ", to.ToString(), " already"));
  }
  if (to.mode == Consistency::kBsp) {
    // A BSP step is a chunk's version, which SSP and ASP pushes move once
    // each: going back needs a version-to-step offset on every chunk.
    return absl::FailedPreconditionError(absl::StrCat(
        "ledger: a switch from ", mode_.ToString(),
        " back to bsp is not built (a BSP step is a chunk's version, which "
        "SSP and ASP pushes move once each)"));
  }
  v1::ConsistencySwitch sw;
  sw.set_from(mode_.ToString());
  sw.set_to(to.ToString());
  sw.set_reason(std::move(reason));
  sw.set_unix_ms(unix_ms);
  v1::LedgerState s = state_;
  if (mode_.mode != Consistency::kBsp) {
    // Both lease from the cursor: only the servers' gate changes (a
    // tighter SSP bound counts from the switch there: AspGate::Adopt). The
    // step is none in particular; the largest clock leased marks it.
    int64_t clock = 0;
    for (const auto& l : s.leases()) clock = std::max(clock, l.step() + 1);
    sw.set_step(clock);
    s.set_mode(sw.to());
    Keep(s, sw);
    STRATA_RETURN_IF_ERROR(Commit(std::move(s), {}));
    mode_ = to;
    spdlog::info("ledger: switched from {} to {} ({})", sw.from(), sw.to(),
                 sw.reason());
    return sw;
  }
  // The fence: the first step no worker holds a lease of (leases ahead
  // included), and no earlier than the job is.
  sw.set_step(std::max(s.applied_steps(), splits_.EndStep()));
  *s.mutable_pending_switch() = sw;
  STRATA_RETURN_IF_ERROR(Commit(std::move(s), {}));
  spdlog::info("ledger: switching from {} to {} at step {} ({})", sw.from(),
               sw.to(), sw.step(), sw.reason());
  return sw;
}

absl::StatusOr<std::optional<v1::ConsistencySwitch>>
Ledger::MaybeCompleteSwitch() {
  absl::MutexLock lock(&mu_);
  if (!state_.has_pending_switch()) return std::nullopt;
  const v1::ConsistencySwitch sw = state_.pending_switch();
  if (state_.applied_steps() < sw.step()) return std::nullopt;
  STRATA_ASSIGN_OR_RETURN(const Consistency to, ParseConsistency(sw.to()));
  v1::LedgerState s = state_;
  s.clear_pending_switch();
  s.set_mode(sw.to());
  // Every sample before the fence's step went into a BSP step; none after
  // it was leased.
  s.set_cursor(sw.step() * s.job().batch());
  s.clear_pending();
  Keep(s, sw);
  SplitTable::Edit splits(splits_);
  splits.DropAll();
  STRATA_RETURN_IF_ERROR(Commit(std::move(s), {}, &splits));
  mode_ = to;
  spdlog::info("ledger: switched from {} to {} at step {}", sw.from(), sw.to(),
               sw.step());
  return sw;
}

void Ledger::LimitBspAhead(int steps) {
  absl::MutexLock lock(&mu_);
  bsp_ahead_ = std::clamp(steps, 0, kMaxLeaseAhead);
}

absl::Status Ledger::CancelSwitch() {
  absl::MutexLock lock(&mu_);
  if (!state_.has_pending_switch()) return absl::OkStatus();
  v1::LedgerState s = state_;
  s.clear_pending_switch();
  return Commit(std::move(s), {});
}

}  // namespace strata::scheduler_internal
