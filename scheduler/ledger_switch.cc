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
  v1::ConsistencySwitch sw;
  sw.set_from(mode_.ToString());
  sw.set_to(to.ToString());
  sw.set_reason(std::move(reason));
  sw.set_unix_ms(unix_ms);
  if (to.mode == Consistency::kBsp) return BeginBackToBsp(std::move(sw));
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
  if (mode_.mode != Consistency::kBsp) return CompleteBackToBsp();
  const v1::ConsistencySwitch sw = state_.pending_switch();
  if (state_.applied_steps() < sw.step()) return std::nullopt;
  STRATA_ASSIGN_OR_RETURN(const Consistency to, ParseConsistency(sw.to()));
  v1::LedgerState s = state_;
  s.clear_pending_switch();
  s.set_mode(sw.to());
  // Every sample before the fence's step went into a BSP step; none after
  // it was leased.
  s.set_cursor(BspFirstSample(s, sw.step()));
  // Every chunk's version is the fence's step here.
  s.set_async_bound(sw.step());
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

absl::StatusOr<v1::ConsistencySwitch> Ledger::BeginBackToBsp(
    v1::ConsistencySwitch sw) {
  v1::LedgerState s = state_;
  const int64_t batch = s.job().batch();
  const int64_t total = s.job().total_samples();
  const int64_t cursor = s.cursor();
  if (!s.has_job() || batch <= 0) {
    return absl::FailedPreconditionError(
        "ledger: no job yet (no worker has leased work)");
  }
  // A: whole batches from it end at the job's end (or, with no end, at a
  // multiple of the batch).
  const int64_t first = total > 0 ? cursor + (total - cursor) % batch
                                  : (cursor + batch - 1) / batch * batch;
  if (total > 0 && first >= total) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ledger: the samples left (", std::max<int64_t>(0, total - cursor),
        ") make no whole BSP step; every step is handed out"));
  }
  // The versions the SSP/ASP pushes reached are bounded by async_bound,
  // which a ledger written before it was kept does not have.
  for (auto sw_it = s.switches().rbegin(); sw_it != s.switches().rend();
       ++sw_it) {
    if (sw_it->from() != "bsp") continue;
    if (s.async_bound() < sw_it->step()) {
      return absl::FailedPreconditionError(
          "ledger: this job left BSP under an older scheduler, which did not "
          "count the leases since; it cannot go back to BSP");
    }
    break;
  }
  sw.set_step(0);  // fixed when made
  sw.set_first_sample(first);
  sw.set_schedule_step(first / batch);
  *s.mutable_pending_switch() = sw;
  STRATA_RETURN_IF_ERROR(Commit(std::move(s), {}));
  spdlog::info(
      "ledger: switching from {} back to bsp once samples up to {} are "
      "applied ({})",
      sw.from(), first, sw.reason());
  return sw;
}

absl::StatusOr<std::optional<v1::ConsistencySwitch>>
Ledger::CompleteBackToBsp() {
  v1::ConsistencySwitch sw = state_.pending_switch();
  if (state_.cursor() < sw.first_sample() || state_.leases_size() > 0 ||
      state_.requeued_size() > 0) {
    return std::nullopt;
  }
  v1::LedgerState s = state_;
  // Past every chunk's version (each lease moved each chunk once at most)
  // and every clock leased, so a retried SSP/ASP push is an old step.
  const int64_t step = std::max<int64_t>(s.async_bound(), 1);
  sw.set_step(step);
  s.clear_pending_switch();
  s.set_mode(sw.to());
  s.set_applied_steps(step);
  s.clear_closed_ahead();
  s.clear_pending();
  s.set_bsp_base_step(step);
  s.set_bsp_base_sample(sw.first_sample());
  s.set_schedule_offset(step - sw.schedule_step());
  Keep(s, sw);
  SplitTable::Edit splits(splits_);
  splits.DropAll();
  STRATA_RETURN_IF_ERROR(Commit(std::move(s), {}, &splits));
  mode_ = Consistency();
  // Every worker takes part in BSP steps: none is drained (each lease
  // answers the view's flag from this).
  drained_.clear();
  spdlog::info(
      "ledger: switched from {} back to bsp at step {} (samples from {}, "
      "schedule step {})",
      sw.from(), step, sw.first_sample(), sw.schedule_step());
  return sw;
}

int64_t Ledger::CursorEnd(const v1::LedgerState& s) {
  if (s.has_pending_switch() && s.pending_switch().to() == "bsp") {
    return s.pending_switch().first_sample();
  }
  return s.job().total_samples() > 0 ? s.job().total_samples() : kNoEnd;
}

void Ledger::LimitAhead(int steps) {
  absl::MutexLock lock(&mu_);
  ahead_ = std::clamp(steps, 0, kMaxLeaseAhead);
}

absl::Status Ledger::CancelSwitch() {
  absl::MutexLock lock(&mu_);
  if (!state_.has_pending_switch()) return absl::OkStatus();
  v1::LedgerState s = state_;
  s.clear_pending_switch();
  return Commit(std::move(s), {});
}

}  // namespace strata::scheduler_internal
