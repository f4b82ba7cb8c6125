#include "server/shard_membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace strata {

bool ShardMembership::Publish(const v1::View& v) {
  absl::MutexLock lock(&mu_);
  if (v.epoch() < view_.epoch) return false;  // views only move forward
  view_ = ViewOf(v);
  changed_.SignalAll();
  return true;
}

ShardView ShardMembership::ViewOf(const v1::View& v) {
  ShardView out;
  out.epoch = v.epoch();
  out.workers_epoch = v.workers_epoch();
  for (const v1::Member& m : v.workers()) {
    out.workers.push_back(m.id());
    out.joined_epoch[m.id()] = m.joined_epoch();
    if (m.drained()) out.drained.push_back(m.id());
  }
  std::sort(out.workers.begin(), out.workers.end());
  std::sort(out.drained.begin(), out.drained.end());
  if (!v.consistency_switches().empty())
    out.switch_step = v.consistency_switches().rbegin()->step();
  return out;
}

ShardView ShardMembership::Get() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

bool ShardMembership::IsWorker(uint64_t member) const {
  absl::MutexLock lock(&mu_);
  return view_.IsLive(member);
}

absl::Status ShardMembership::AwaitWorker(
    uint64_t member, uint64_t epoch,
    absl::FunctionRef<absl::Status(const ShardView&)> also) {
  absl::MutexLock lock(&mu_);
  // A worker can know a newer view than this server: give ours a moment.
  if (view_.epoch < epoch && !cancelled_) {
    STRATA_RETURN_IF_ERROR(EnterWait(member));
    WaitFor([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return view_.epoch >= epoch;
    });
    waits_.Leave(member);
  }
  if (cancelled_) return absl::UnavailableError("the server is shutting down");
  if (view_.epoch < epoch) {
    // Nothing from a view this server has not seen is applied.
    return absl::UnavailableError(
        absl::StrCat("request stamped with view epoch ", epoch,
                     " but this server knows epoch ", view_.epoch,
                     " at most; retry once it has caught up"));
  }
  if (!view_.IsLive(member)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", member, " is not a live worker in view epoch ", view_.epoch,
        " (its lease ran out or it left: register again)"));
  }
  return also(view_);
}

absl::Status ShardMembership::AwaitGeneration(uint64_t generation,
                                              uint64_t member) {
  if (generation_.load() >= generation) return absl::OkStatus();  // as a rule
  absl::MutexLock lock(&mu_);
  if (generation_.load() < generation && !cancelled_) {
    STRATA_RETURN_IF_ERROR(EnterWait(member));
    WaitFor([&] { return generation_.load() >= generation; });
    waits_.Leave(member);
  }
  if (cancelled_) return absl::UnavailableError("the server is shutting down");
  if (generation_.load() < generation) {
    return absl::UnavailableError(
        absl::StrCat("request of rollback generation ", generation,
                     " but this server is in generation ", generation_.load(),
                     "; retry once it has rolled back"));
  }
  return absl::OkStatus();
}

absl::Status ShardMembership::EnterWait(uint64_t member) {
  const WaitQuota::Full full = waits_.Enter(member, max_waits_per_member_);
  if (full == WaitQuota::Full::kNo) {
    counters_.view_waits++;
    return absl::OkStatus();
  }
  counters_.view_waits_refused++;
  return absl::UnavailableError(absl::StrCat(
      "this server is behind the request's view or rollback generation and ",
      full == WaitQuota::Full::kKey
          ? absl::StrCat(max_waits_per_member_, " requests of member ", member)
          : absl::StrCat(max_waits_, " requests"),
      " wait for it already; retry"));
}

void ShardMembership::WaitFor(absl::FunctionRef<bool()> done) {
  const absl::Time deadline = absl::Now() + view_wait_;
  while (!done() && !cancelled_) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
}

void ShardMembership::SetGeneration(uint64_t generation) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
  changed_.SignalAll();
}

void ShardMembership::Cancel() {
  cancelled_ = true;
  absl::MutexLock lock(&mu_);
  changed_.SignalAll();
}

}  // namespace strata
