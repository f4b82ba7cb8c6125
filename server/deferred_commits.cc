#include "server/deferred_commits.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"

namespace strata {

bool FailedCommits::Failed(uint64_t member, int64_t step) const {
  absl::MutexLock lock(&mu_);
  auto it = failed_.find(member);
  return it != failed_.end() && it->second == step;
}

void FailedCommits::Set(uint64_t member, int64_t step) {
  absl::MutexLock lock(&mu_);
  failed_[member] = step;
}

void FailedCommits::Clear(uint64_t member) {
  absl::MutexLock lock(&mu_);
  failed_.erase(member);
}

void FailedCommits::Forget(absl::FunctionRef<bool(uint64_t member)> live) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(failed_, [&](const auto& kv) { return !live(kv.first); });
}

void FailedCommits::Export(v1::ShardStateHeader* out) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [member, step] : failed_) {
    v1::FailedCommitState* f = out->add_failed();
    f->set_member_id(member);
    f->set_step(step);
  }
}

void FailedCommits::Import(const v1::ShardStateHeader& in) {
  absl::MutexLock lock(&mu_);
  failed_.clear();
  for (const v1::FailedCommitState& f : in.failed())
    failed_[f.member_id()] = f.step();
}

void DeferredCommits::Export(v1::ShardStateHeader* out) {
  absl::MutexLock lock(&mu_);
  for (const auto& [member, chunks] : held_) {
    for (const auto& [chunk, d] : chunks) {
      v1::HeldPushState* h = out->add_held();
      *h->mutable_req() = d.req;
      h->set_grad(reinterpret_cast<const char*>(d.grad.data()),
                  d.grad.size() * sizeof(float));
      h->set_arrival(d.arrival);
      h->set_pulled(d.pulled);
    }
  }
  for (const auto& [member, last] : last_commit_) {
    v1::LastCommitState* c = out->add_last_commits();
    c->set_member_id(member);
    c->set_step(last.step);
    c->set_pushes(last.pushes);
    c->set_code(static_cast<int>(last.result.status().code()));
    c->set_message(std::string(last.result.status().message()));
    if (last.result.ok()) *c->mutable_response() = *last.result;
  }
}

absl::Status DeferredCommits::Import(const v1::ShardStateHeader& in) {
  for (const v1::HeldPushState& h : in.held()) {
    if (h.grad().size() % sizeof(float) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a held push of chunk ", h.req().chunk_id(), " has ", h.grad().size(),
          " bytes of gradient: not whole floats"));
    }
  }
  absl::MutexLock lock(&mu_);
  for (auto& [member, chunks] : held_) {
    for (auto& [chunk, d] : chunks) pool_.Give(std::move(d.grad));
  }
  held_.clear();
  last_commit_.clear();
  for (const v1::HeldPushState& h : in.held()) {
    Held& d = held_[h.req().member_id()][h.req().chunk_id()];
    d.req = h.req();
    if (!h.req().zero()) {
      d.grad = pool_.Take(h.grad().size() / sizeof(float));
      std::memcpy(d.grad.data(), h.grad().data(), h.grad().size());
    }
    d.arrival = h.arrival();
    d.pulled = h.pulled();
    arrivals_ = std::max(arrivals_, h.arrival());
  }
  for (const v1::LastCommitState& c : in.last_commits()) {
    LastCommit& last = last_commit_[c.member_id()];
    last.step = c.step();
    last.pushes = c.pushes();
    if (c.code() == 0) {
      last.result = c.response();
    } else {
      last.result =
          absl::Status(static_cast<absl::StatusCode>(c.code()), c.message());
    }
  }
  return absl::OkStatus();
}

void DeferredCommits::Hold(const v1::PushRequest& req, std::vector<float> grad,
                           uint64_t pulled) {
  failed_.Clear(req.member_id());  // a new attempt: its commit has not failed
  absl::MutexLock lock(&mu_);
  // A retry, or a step that was never committed (redone after a rollback or
  // a view change): the newest (generation, step, epoch, push, attempt)
  // wins, so a late handler of an abandoned attempt cannot replace a newer
  // push, nor the retry of its own (its payload may have been read after
  // the caller reused the bytes).
  Held& d = held_[req.member_id()][req.chunk_id()];
  auto order = [](const v1::PushRequest& r) {
    return std::tuple(r.generation(), r.step(), r.epoch(), r.push_seq(),
                      r.attempt());
  };
  const bool holding = d.arrival != 0;  // (a zero push holds no floats)
  if (holding && order(req) < order(d.req)) {
    pool_.Give(std::move(grad));
    return;
  }
  if (holding) pool_.Give(std::move(d.grad));
  d.req = req;
  d.grad = std::move(grad);
  d.arrival = ++arrivals_;
  d.pulled = pulled;
}

void DeferredCommits::Drop(absl::FunctionRef<bool(uint64_t member)> live) {
  absl::MutexLock lock(&mu_);
  for (auto it = held_.begin(); it != held_.end();) {
    if (live(it->first)) {
      ++it;
      continue;
    }
    for (auto& [chunk, d] : it->second) pool_.Give(std::move(d.grad));
    held_.erase(it++);
  }
  absl::erase_if(last_commit_, [&](const auto& kv) { return !live(kv.first); });
  failed_.Forget(live);
}

absl::StatusOr<v1::CommitResponse> DeferredCommits::Commit(
    const v1::CommitRequest& req, ApplyFn apply, bool* marked_failed) {
  absl::StatusOr<v1::CommitResponse> result = ApplyCommit(req, apply);
  absl::MutexLock lock(&mu_);
  // A duplicate of a commit still applying finds nothing held and no
  // answer yet, and fails: that failure must not stand once the commit
  // itself has succeeded (whichever of the two gets here first).
  auto last = last_commit_.find(req.member_id());
  const bool succeeded = last != last_commit_.end() &&
                         last->second.step == req.step() &&
                         last->second.result.ok();
  *marked_failed = !result.ok() && !succeeded;
  if (*marked_failed) {
    failed_.Set(req.member_id(), req.step());
  } else {
    failed_.Clear(req.member_id());
  }
  return result;
}

std::vector<DeferredCommits::Held> DeferredCommits::Take(uint64_t member,
                                                         int64_t step) {
  std::vector<Held> held;
  absl::MutexLock lock(&mu_);
  auto it = held_.find(member);
  if (it == held_.end()) return held;
  for (auto& [chunk, d] : it->second) {
    if (d.req.step() == step) {
      held.push_back(std::move(d));
    } else {
      pool_.Give(std::move(d.grad));  // a step that was never committed
    }
  }
  held_.erase(it);
  return held;
}

absl::StatusOr<v1::CommitResponse> DeferredCommits::ApplyCommit(
    const v1::CommitRequest& req, ApplyFn apply) {
  if (!(req.scale() > 0.0f && req.scale() <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("commit scale ", req.scale(),
                     " is not in (0, 1]: clipping only shrinks a gradient"));
  }
  std::vector<Held> held = Take(req.member_id(), req.step());
  if (held.empty()) {
    // A retry of a commit whose answer was lost: the same answer.
    absl::MutexLock lock(&mu_);
    auto last = last_commit_.find(req.member_id());
    if (last != last_commit_.end() && last->second.step == req.step() &&
        last->second.pushes == req.pushes()) {
      return last->second.result;
    }
  }
  if (held.size() != req.pushes()) {
    for (Held& d : held) pool_.Give(std::move(d.grad));
    counters_.rejected_other++;
    return absl::AbortedError(absl::StrCat(
        "this server holds ", held.size(), " of the ", req.pushes(),
        " deferred pushes of step ", req.step(), " by member ", req.member_id(),
        " (it restarted, or the member left the view, since): redo the step"));
  }
  Order(held);
  std::vector<absl::Status> results(held.size());
  std::vector<char> applied(held.size(), 0);
  ForEachInOrder(static_cast<int64_t>(held.size()), [&](int64_t i) {
    Held& d = held[i];
    absl::StatusOr<v1::PushResponse> r = apply(d.req, d.grad, req.scale());
    if (!d.grad.empty()) pool_.Give(std::move(d.grad));
    results[i] = r.status();
    applied[i] = r.ok() && r->applied();
  });
  v1::CommitResponse resp;
  absl::Status first;
  for (size_t i = 0; i < held.size(); ++i) {
    if (!results[i].ok()) counters_.rejected_other++;
    first.Update(results[i]);
    resp.set_applied(resp.applied() + applied[i]);
  }
  absl::StatusOr<v1::CommitResponse> result = resp;
  if (!first.ok()) result = first;
  absl::MutexLock lock(&mu_);
  last_commit_[req.member_id()] = {req.step(), req.pushes(), result};
  return result;
}

void DeferredCommits::Order(std::vector<Held>& held) const {
  // In RAM, in the order the step's pulls came (first layers first; the
  // chunks whose pull is not known after, in the reverse of the order the
  // pushes came): the worker's next pulls, in the same order, are already
  // waiting at the gate, and each is served as soon as its chunk is
  // applied, so the worker's forward pass runs while the rest of the commit
  // applies. So too with a RAM budget spilling the tile used last, which
  // keeps the same tiles whatever the order (each is used once a step), and
  // keeps each applied tile for the pulls waiting on it (TileCache::
  // MakeRoom): a chunk applied before its pull was sent (the client has a
  // few on the wire at a time) would be spilled first, and its pull read
  // the weights back. With the other policies, in the order the pushes came
  // (backward order), as undeferred pushes would apply: LRU and the
  // read-ahead follow it, and the next pulls find the last tiles applied
  // still in RAM.
  if (options_.pull_order) {
    auto key = [](const Held& d) {
      // (Arrivals are unique: the order is total.)
      return std::pair(d.pulled > 0 ? d.pulled : UINT64_MAX, ~d.arrival);
    };
    std::sort(held.begin(), held.end(),
              [&](const Held& a, const Held& b) { return key(a) < key(b); });
  } else {
    std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) {
      return a.arrival < b.arrival;
    });
  }
}

void DeferredCommits::ForEachInOrder(int64_t n,
                                     absl::FunctionRef<void(int64_t i)> apply) {
  if (options_.any_order) {
    // Chunks have their own locks: their updates run in parallel.
    ParallelFor(n, 1, [&](int, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) apply(i);
    });
    return;
  }
  // In parallel but in list order: thread k of T takes items k, k+T, ...,
  // so the tiles are used close to the order the pushes came. (Halves of
  // the list at once would interleave two orders, which the tier could
  // neither keep nor learn.)
  const int64_t lanes = std::min<int64_t>(NumThreads(), n);
  ParallelFor(lanes, 1, [&](int, int64_t begin, int64_t end) {
    for (int64_t lane = begin; lane < end; ++lane) {
      for (int64_t i = lane; i < n; i += lanes) apply(i);
    }
  });
}

}  // namespace strata
