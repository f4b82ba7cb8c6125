// The shard's view of the job: which workers are live (UpdateView, and
// the sweep of each chunk that follows a change), the rollback generation
// requests wait for, and the membership checks of each push. The rest of
// Shard is in shard.cc.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/shard.h"

namespace strata {

bool Shard::IsLive(const ViewState& view, uint64_t member) {
  return std::binary_search(view.workers.begin(), view.workers.end(), member);
}

Shard::ViewState Shard::view() const {
  absl::MutexLock lock(&view_mu_);
  return view_;
}

void Shard::UpdateView(const v1::View& v) {
  // One update at a time: a stale sweep must never undo a newer one.
  absl::MutexLock update_lock(&update_mu_);
  {
    absl::MutexLock lock(&view_mu_);
    if (v.epoch() < view_.epoch) return;  // views only move forward
    view_.epoch = v.epoch();
    view_.workers_epoch = v.workers_epoch();
    view_.workers.clear();
    view_.joined_epoch.clear();
    for (const v1::Member& m : v.workers()) {
      view_.workers.push_back(m.id());
      view_.joined_epoch[m.id()] = m.joined_epoch();
    }
    std::sort(view_.workers.begin(), view_.workers.end());
    view_changed_.SignalAll();
  }
  const ViewState now = view();
  std::vector<Chunk*> all;
  {
    absl::MutexLock lock(&table_mu_);
    for (auto& [id, c] : chunks_) all.push_back(c.get());
  }
  auto live = [&now](uint64_t id) {
    return std::binary_search(now.workers.begin(), now.workers.end(), id);
  };
  // SSP/ASP: a worker that left mid-push is not reported; the ledger hands
  // its units out again.
  applied_.Forget(live);
  DropDeferred(live);
  for (Chunk* c : all) {
    absl::MutexLock lock(&c->mu);
    // BSP: pushes cut for the old set of workers may not count (the new set
    // recomputes the step); MaybeCloseStep drops them, and keeps the ones
    // already computed in this view (a redo that raced the sweep).
    absl::erase_if(c->clocks, [&](const auto& kv) { return !live(kv.first); });
    // (A tile that cannot be read leaves the step open: logged.)
    (void)MaybeCloseStep(*c, now);
    c->changed.SignalAll();
  }
  // Steps closed above read their spilled tiles in: back within budget.
  if (options_.spill != nullptr) MakeRoom(0);
}

absl::Status Shard::AwaitGeneration(uint64_t generation) {
  if (generation_.load() >= generation) return absl::OkStatus();  // as a rule
  absl::MutexLock lock(&view_mu_);
  const absl::Time deadline = absl::Now() + options_.view_wait;
  while (generation_.load() < generation && !cancelled_) {
    if (view_changed_.WaitWithDeadline(&view_mu_, deadline)) break;
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

absl::Status Shard::AwaitWorker(uint64_t member, uint64_t epoch) {
  absl::MutexLock lock(&view_mu_);
  return AwaitWorkerLocked(member, epoch);
}

absl::Status Shard::AwaitWorkerLocked(uint64_t member, uint64_t epoch) {
  // A worker can know a newer view than this server: give ours a moment.
  const absl::Time deadline = absl::Now() + options_.view_wait;
  while (view_.epoch < epoch && !cancelled_) {
    if (view_changed_.WaitWithDeadline(&view_mu_, deadline)) break;
  }
  if (cancelled_) return absl::UnavailableError("the server is shutting down");
  if (view_.epoch < epoch) {
    // Nothing from a view this server has not seen is applied.
    return absl::UnavailableError(
        absl::StrCat("request stamped with view epoch ", epoch,
                     " but this server knows epoch ", view_.epoch,
                     " at most; retry once it has caught up"));
  }
  if (!std::binary_search(view_.workers.begin(), view_.workers.end(), member)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", member, " is not a live worker in view epoch ", view_.epoch,
        " (its lease ran out or it left: register again)"));
  }
  return absl::OkStatus();
}

absl::Status Shard::CheckMember(const v1::PushRequest& req) {
  absl::MutexLock lock(&view_mu_);
  STRATA_RETURN_IF_ERROR(AwaitWorkerLocked(req.member_id(), req.epoch()));
  // BSP: PushBsp checks the epoch against the live workers, under the
  // chunk's lock.
  if (options_.consistency.mode == Consistency::kBsp) return absl::OkStatus();
  // SSP/ASP: a gradient computed under an older view is still a valid
  // gradient, so only an epoch from before this member joined is stale: it
  // cannot be this member's current work.
  const uint64_t joined = view_.joined_epoch[req.member_id()];
  if (req.epoch() < joined) {
    return absl::AbortedError(
        absl::StrCat("push stamped with epoch ", req.epoch(),
                     " is stale: member ", req.member_id(), " joined at epoch ",
                     joined, "; refresh the view and retry the step"));
  }
  return absl::OkStatus();
}

}  // namespace strata
