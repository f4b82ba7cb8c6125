// Deferred pushes (ps.proto PushRequest.deferred) and their Commit: a
// worker's gradients held, checked, until it knows the factor its clipping
// scales them by. The rest of Shard is in shard.cc.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"
#include "common/status.h"
#include "server/shard.h"

namespace strata {

absl::StatusOr<v1::PushResponse> Shard::Hold(Chunk& c,
                                             const v1::PushRequest& req,
                                             std::vector<float> grad) {
  v1::PushResponse resp;
  uint64_t pulled = 0;
  {
    absl::MutexLock lock(&c.mu);
    STRATA_RETURN_IF_ERROR(CheckGeneration(c, req.generation()));
    resp.set_version(c.rec.version);
    for (const Chunk::PullArrival& p : c.step_pulls) {
      if (p.clock == req.step()) pulled = p.arrival;
    }
  }
  {
    // A new attempt: its commit has not failed (yet).
    absl::MutexLock failed(&commit_failed_mu_);
    commit_failed_.erase(req.member_id());
  }
  absl::MutexLock lock(&deferred_mu_);
  // A retry, or a step that was never committed (redone after a rollback or
  // a view change): the newest (generation, step, epoch, push, attempt)
  // wins, so a late handler of an abandoned attempt cannot replace a newer
  // push, nor the retry of its own (its payload may have been read after
  // the caller reused the bytes).
  Deferred& d = deferred_[req.member_id()][req.chunk_id()];
  auto order = [](const v1::PushRequest& r) {
    return std::tuple(r.generation(), r.step(), r.epoch(), r.push_seq(),
                      r.attempt());
  };
  if (!d.grad.empty() && order(req) < order(d.req)) {
    GiveBuffer(std::move(grad));
    return resp;
  }
  if (!d.grad.empty()) GiveBuffer(std::move(d.grad));
  d.req = req;
  d.grad = std::move(grad);
  d.arrival = ++deferred_arrivals_;
  d.pulled = pulled;
  return resp;
}

void Shard::DropDeferred(absl::FunctionRef<bool(uint64_t member)> live) {
  absl::MutexLock lock(&deferred_mu_);
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    if (live(it->first)) {
      ++it;
      continue;
    }
    for (auto& [chunk, d] : it->second) GiveBuffer(std::move(d.grad));
    deferred_.erase(it++);
  }
  absl::erase_if(last_commit_, [&](const auto& kv) { return !live(kv.first); });
  absl::MutexLock failed(&commit_failed_mu_);
  absl::erase_if(commit_failed_,
                 [&](const auto& kv) { return !live(kv.first); });
}

bool Shard::CommitFailed(uint64_t member, int64_t step) {
  absl::MutexLock lock(&commit_failed_mu_);
  auto it = commit_failed_.find(member);
  return it != commit_failed_.end() && it->second == step;
}

absl::StatusOr<v1::CommitResponse> Shard::Commit(const v1::CommitRequest& req) {
  absl::StatusOr<v1::CommitResponse> result = ApplyCommit(req);
  {
    absl::MutexLock held(&deferred_mu_);
    // A duplicate of a commit still applying finds nothing held and no
    // answer yet, and fails: that failure must not stand once the commit
    // itself has succeeded (whichever of the two gets here first).
    auto last = last_commit_.find(req.member_id());
    const bool succeeded = last != last_commit_.end() &&
                           last->second.step == req.step() &&
                           last->second.result.ok();
    absl::MutexLock lock(&commit_failed_mu_);
    if (result.ok() || succeeded) {
      commit_failed_.erase(req.member_id());
      return result;
    }
    commit_failed_[req.member_id()] = req.step();
  }
  WakeWaiters();  // pulls waiting for the step: it will not close
  return result;
}

absl::StatusOr<v1::CommitResponse> Shard::ApplyCommit(
    const v1::CommitRequest& req) {
  if (!(req.scale() > 0.0f && req.scale() <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("commit scale ", req.scale(),
                     " is not in (0, 1]: clipping only "
                     "shrinks a gradient"));
  }
  std::vector<Deferred> held;
  {
    absl::MutexLock lock(&deferred_mu_);
    auto it = deferred_.find(req.member_id());
    if (it != deferred_.end()) {
      for (auto& [chunk, d] : it->second) {
        if (d.req.step() == req.step()) {
          held.push_back(std::move(d));
        } else {
          GiveBuffer(std::move(d.grad));  // a step that was never committed
        }
      }
      deferred_.erase(it);
    }
  }
  if (held.empty()) {
    // A retry of a commit whose answer was lost: the same answer.
    absl::MutexLock lock(&deferred_mu_);
    auto last = last_commit_.find(req.member_id());
    if (last != last_commit_.end() && last->second.step == req.step() &&
        last->second.pushes == req.pushes()) {
      return last->second.result;
    }
  }
  if (held.size() != req.pushes()) {
    for (Deferred& d : held) GiveBuffer(std::move(d.grad));
    counters_.rejected_other++;
    return absl::AbortedError(absl::StrCat(
        "this server holds ", held.size(), " of the ", req.pushes(),
        " deferred pushes of step ", req.step(), " by member ", req.member_id(),
        " (it restarted, or the member left the view, since): redo the step"));
  }
  // In RAM, in the order the step's pulls came (first layers first; the
  // chunks whose pull is not known after, in the reverse of the order the
  // pushes came): the worker's next pulls, in the same order, are already
  // waiting at the gate, and each is served as soon as its chunk is applied, so
  // the worker's forward pass runs while the rest of the commit applies. So too
  // with a RAM budget spilling the tile used last, which keeps the same tiles
  // whatever the order (each is used once a step), and keeps each applied tile
  // for the pulls waiting on it (MakeRoom): a chunk applied before its pull was
  // sent (the client has a few on the wire at a time) would be spilled first,
  // and its pull read the weights back. With the other policies, in the order
  // the pushes came (backward order), as undeferred pushes would apply: LRU and
  // the read-ahead follow it, and the next pulls find the last tiles applied
  // still in RAM.
  if (options_.spill == nullptr ||
      options_.spill->eviction() == SpillOptions::Eviction::kJustUsed) {
    auto key = [](const Deferred& d) {
      // (Arrivals are unique: the order is total.)
      return std::pair(d.pulled > 0 ? d.pulled : UINT64_MAX, ~d.arrival);
    };
    std::sort(
        held.begin(), held.end(),
        [&](const Deferred& a, const Deferred& b) { return key(a) < key(b); });
  } else {
    std::sort(held.begin(), held.end(),
              [](const Deferred& a, const Deferred& b) {
                return a.arrival < b.arrival;
              });
  }
  std::vector<absl::Status> results(held.size());
  std::vector<char> applied(held.size(), 0);
  auto apply = [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Deferred& d = held[i];
      auto r = [&]() -> absl::StatusOr<v1::PushResponse> {
        STRATA_ASSIGN_OR_RETURN(Chunk * c, FindChunk(d.req.chunk_id()));
        STRATA_RETURN_IF_ERROR(CheckMember(d.req));
        return Apply(*c, d.req, std::move(d.grad), req.scale());
      }();
      if (!d.grad.empty()) GiveBuffer(std::move(d.grad));
      results[i] = r.status();
      applied[i] = r.ok() && r->applied();
    }
  };
  if (options_.spill == nullptr) {
    // Chunks have their own locks: their updates run in parallel.
    ParallelFor(static_cast<int64_t>(held.size()), 1, apply);
  } else {
    // In parallel but in list order: thread k of T takes items k, k+T, ...,
    // so the tiles are used close to the order the pushes came. (Halves of
    // the list at once would interleave two orders, which the tier could
    // neither keep nor learn.)
    const int64_t n = static_cast<int64_t>(held.size());
    const int64_t lanes = std::min<int64_t>(NumThreads(), n);
    ParallelFor(lanes, 1, [&](int, int64_t begin, int64_t end) {
      for (int64_t lane = begin; lane < end; ++lane) {
        for (int64_t i = lane; i < n; i += lanes) apply(0, i, i + 1);
      }
    });
  }
  v1::CommitResponse resp;
  absl::Status first;
  for (size_t i = 0; i < held.size(); ++i) {
    if (!results[i].ok()) counters_.rejected_other++;
    first.Update(results[i]);
    resp.set_applied(resp.applied() + applied[i]);
  }
  absl::StatusOr<v1::CommitResponse> result = resp;
  if (!first.ok()) result = first;
  absl::MutexLock lock(&deferred_mu_);
  last_commit_[req.member_id()] = {req.step(), req.pushes(), result};
  return result;
}

}  // namespace strata
