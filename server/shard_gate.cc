#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/bf16.h"
#include "common/status.h"
#include "common/wire.h"
#include "server/shard.h"
#include "spdlog/spdlog.h"

// The consistency gate: its update rules (BSP steps collected, checked and
// closed; SSP/ASP pushes applied at once) and the pulls that wait at it
// (versions, SSP clocks). The rest of Shard is in shard.cc; capture for
// snapshots in shard_snapshot.cc, deferred pushes in shard_deferred.cc.
namespace strata {

absl::StatusOr<v1::PushResponse> Shard::PushBsp(Chunk& c,
                                                const v1::PushRequest& req,
                                                std::vector<float> grad,
                                                float scale) {
  absl::MutexLock lock(&c.mu);
  if (absl::Status s = CheckGeneration(c, req.generation()); !s.ok()) {
    GiveBuffer(std::move(grad));
    return s;
  }
  // The view read under the chunk's lock: a view change sweeps each chunk
  // under its lock after publishing, so a push from a worker that has left
  // is either refused here or dropped by the sweep, never counted.
  const ViewState now = view();
  if (!IsLive(now, req.member_id())) {
    GiveBuffer(std::move(grad));
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", req.member_id(), " left the view (epoch ", now.epoch, ")"));
  }
  // The step's shares were cut for an older set of workers. Checked under
  // the chunk's lock, so a view change's sweep of this chunk comes either
  // before (refused here) or after (dropped by the sweep).
  if (req.epoch() < now.workers_epoch) {
    GiveBuffer(std::move(grad));
    counters_.aborted_stale_epoch++;
    return absl::AbortedError(absl::StrCat(
        "step ", req.step(), " was computed in view epoch ", req.epoch(),
        " but the live workers changed at epoch ", now.workers_epoch,
        "; redo the step with the new view's shares"));
  }
  // The tile stays where it is (a spilled one keeps its version in RAM):
  // only the push that closes the step needs it (MaybeCloseStep), so each
  // step reads a spilled tile once, not once per worker.
  v1::PushResponse resp;
  const int64_t open_step = static_cast<int64_t>(c.rec.version);
  if (req.step() < open_step) {
    // The step closed on pushes that covered all of its samples: this one
    // (a retry whose reply was lost, or a redo of a step that had already
    // closed here) changes nothing.
    resp.set_version(c.rec.version);
    GiveBuffer(std::move(grad));
    return resp;
  }
  if (req.step() > open_step) {
    GiveBuffer(std::move(grad));
    return absl::FailedPreconditionError(absl::StrCat(
        "push for step ", req.step(), " but chunk ", req.chunk_id(),
        " is at step ", open_step, ": pull version ", req.step(),
        " before computing that step"));
  }
  if (req.whole_step()) {
    // The workers reduced the step among themselves: this push is all of
    // it, whatever else arrived for the step.
    for (auto& [id, contrib] : c.open) GiveBuffer(std::move(contrib.grad));
    c.open.clear();
  }
  // A retry of a counted push changes nothing; a redo (a newer epoch)
  // replaces what the member pushed before.
  auto [it, inserted] = c.open.try_emplace(req.member_id());
  if (inserted || it->second.epoch < req.epoch()) {
    if (!inserted) GiveBuffer(std::move(it->second.grad));
    it->second =
        Contribution{req.num_samples(), req.first_sample(), req.epoch(),
                     std::move(grad),   req.whole_step(),   scale};
  } else {
    GiveBuffer(std::move(grad));
  }
  const uint64_t before = c.rec.version;
  // An error reading the tile leaves the step open, this push counted; it
  // is lost state (Shard::set_lost_state_sink), so a server stops and the
  // job goes on from its snapshot. (A Shard with no sink: a retry of the
  // push or the redo after a view change closes the step.)
  STRATA_RETURN_IF_ERROR(MaybeCloseStep(c, now));
  resp.set_version(c.rec.version);
  resp.set_applied(c.rec.version != before);
  return resp;
}

absl::Status Shard::MaybeCloseStep(Chunk& c, const ViewState& view) {
  if (c.open.empty() || options_.consistency.mode != Consistency::kBsp)
    return absl::OkStatus();
  // Pushes of workers that left, and pushes cut for an older set of
  // workers, count for nothing: the step is redone without them.
  for (auto it = c.open.begin(); it != c.open.end();) {
    if (IsLive(view, it->first) && it->second.epoch >= view.workers_epoch) {
      ++it;
    } else {
      GiveBuffer(std::move(it->second.grad));
      it = c.open.erase(it);
    }
  }
  if (c.open.empty()) return absl::OkStatus();
  const bool whole = c.open.size() == 1 && c.open.begin()->second.whole_step;
  for (uint64_t w : view.workers) {
    if (!whole && !c.open.contains(w)) return absl::OkStatus();
  }
  // Sample-weighted mean, summed in member-id order (std::map), so the
  // result does not depend on the order pushes arrived in.
  uint64_t total = 0, epoch = 0;
  for (const auto& [id, contrib] : c.open) {
    total += contrib.samples;
    epoch = std::max(epoch, contrib.epoch);
  }
  // The tile, read now if spilled.
  if (absl::Status s = Resident(c); !s.ok()) {
    spdlog::error("strata server: cannot close step {} of chunk {}: {}",
                  c.rec.version, c.spec.chunk_id(), s.ToString());
    return s;  // the step stays open: see PushBsp
  }
  CheckTiling(c);
  counters_.bsp_samples_applied += total;
  // mean = 0 + the sum of weight * (g * scale), in member-id order: the
  // same float operations as scaling each gradient, zeroing a buffer and
  // adding them to it (g * 1 is g; 0 + x turns -0 into +0 as that did),
  // formed a block at a time as the update reaches it.
  struct Term {
    float weight, scale;
    const float* g;
  };
  std::vector<Term> terms;
  for (const auto& [id, contrib] : c.open) {
    terms.push_back(
        {static_cast<float>(static_cast<double>(contrib.samples) / total),
         contrib.scale, contrib.grad.data()});
  }
  const int64_t step = static_cast<int64_t>(c.rec.version);
  ApplyGradient(c, step, [&terms](size_t begin, size_t end, float* out) {
    const size_t n = end - begin;
    const Term& first = terms.front();
    const float* g = first.g + begin;
    for (size_t i = 0; i < n; ++i) {
      out[i] = 0.0f + first.weight * (g[i] * first.scale);
    }
    for (size_t k = 1; k < terms.size(); ++k) {
      const Term& t = terms[k];
      g = t.g + begin;
      for (size_t i = 0; i < n; ++i) out[i] += t.weight * (g[i] * t.scale);
    }
  });
  NoteApplied(c, step, 0, epoch);
  for (auto& [id, contrib] : c.open) GiveBuffer(std::move(contrib.grad));
  c.open.clear();
  c.changed.SignalAll();
  if (options_.snapshot_every > 0 &&
      static_cast<int64_t>(c.rec.version) % options_.snapshot_every == 0) {
    CaptureForSnapshot(c);
  }
  return absl::OkStatus();
}

void Shard::CheckTiling(const Chunk& c) {
  std::vector<std::pair<uint64_t, uint64_t>> runs;  // (first, count)
  for (const auto& [id, contrib] : c.open)
    runs.emplace_back(contrib.first_sample, contrib.samples);
  std::sort(runs.begin(), runs.end());
  for (size_t i = 1; i < runs.size(); ++i) {
    if (runs[i].first != runs[i - 1].first + runs[i - 1].second) {
      counters_.bsp_tiling_errors++;
      spdlog::warn(
          "strata server: step {} of chunk {} closed on pushes that do not "
          "tile one run of samples ([{}, +{}) then [{}, +{}))",
          c.rec.version, c.spec.chunk_id(), runs[i - 1].first,
          runs[i - 1].second, runs[i].first, runs[i].second);
      return;
    }
  }
}

void Shard::ApplyGradient(
    Chunk& c, int64_t step,
    absl::FunctionRef<void(size_t begin, size_t end, float* out)> form) {
  const OptimizerParams& p = c.group->params;
  float* m = c.rec.slots.size() > 0 ? c.rec.slots[0].data() : nullptr;
  float* v = c.rec.slots.size() > 1 ? c.rec.slots[1].data() : nullptr;
  ApplyUpdateFormed(p, ScheduledLr(p, step),
                    static_cast<int64_t>(c.rec.version) + 1,
                    c.rec.weights.data(), m, v, c.rec.weights.size(), form);
  Applied(c);
}

void Shard::ApplyGradient(Chunk& c, int64_t step, const float* grad) {
  const OptimizerParams& p = c.group->params;
  float* m = c.rec.slots.size() > 0 ? c.rec.slots[0].data() : nullptr;
  float* v = c.rec.slots.size() > 1 ? c.rec.slots[1].data() : nullptr;
  ApplyUpdate(p, ScheduledLr(p, step), static_cast<int64_t>(c.rec.version) + 1,
              c.rec.weights.data(), m, v, grad, c.rec.weights.size());
  Applied(c);
}

void Shard::Applied(Chunk& c) {
  c.rec.version++;
  Dirty(c);
  counters_.pushes_applied++;
}

absl::StatusOr<v1::PushResponse> Shard::PushAsync(
    Chunk& c, const v1::PushRequest& req, const std::vector<float>& grad,
    float scale) {
  absl::MutexLock lock(&c.mu);
  STRATA_RETURN_IF_ERROR(CheckGeneration(c, req.generation()));
  STRATA_RETURN_IF_ERROR(Resident(c));
  const ViewState now = view();
  if (!IsLive(now, req.member_id())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", req.member_id(), " left the view (epoch ", now.epoch, ")"));
  }
  v1::PushResponse resp;
  // A step this worker already pushed here is a retry of a push that was
  // applied (e.g. its reply was lost): apply it once.
  if (auto it = c.clocks.find(req.member_id());
      it != c.clocks.end() && req.step() < it->second) {
    resp.set_version(c.rec.version);
    resp.set_applied(false);
    return resp;
  }
  const float* g = grad.data();
  if (scale == 1.0f) {
    ApplyGradient(c, req.step(), g);
  } else {
    ApplyGradient(c, req.step(),
                  [g, scale](size_t begin, size_t end, float* out) {
                    for (size_t i = begin; i < end; ++i) {
                      out[i - begin] = g[i] * scale;
                    }
                  });
  }
  NoteApplied(c, req.step(), req.member_id(), req.epoch());
  int64_t& clock = c.clocks[req.member_id()];
  clock = std::max(clock, req.step() + 1);
  c.changed.SignalAll();
  resp.set_version(c.rec.version);
  resp.set_applied(true);
  return resp;
}

void Shard::NoteApplied(const Chunk& c, int64_t step, uint64_t worker,
                        uint64_t epoch) {
  std::optional<v1::AppliedReport> done =
      applied_.Note(step, worker, epoch, num_chunks_.load());
  if (!done.has_value()) return;
  done->set_generation(c.generation);
  absl::MutexLock lock(&applied_sink_mu_);
  if (applied_sink_) applied_sink_(*done);
}

void Shard::set_applied_sink(AppliedSink sink) {
  absl::MutexLock lock(&applied_sink_mu_);
  applied_sink_ = std::move(sink);
}

void Shard::NotePullOfStep(Chunk& c, int64_t clock, uint64_t arrival) {
  Chunk::PullArrival* slots = c.step_pulls;
  if (slots[0].clock == clock || slots[1].clock == clock) return;
  // Keeps the step before (a slower worker may still commit it) and
  // replaces the other: a clock that jumped back (a rollback, a redo)
  // leaves no stale entry behind for long.
  const int replace = slots[0].clock == clock - 1 ? 1 : 0;
  slots[replace] = {clock, arrival};
}

int64_t Shard::MinClock(const Chunk& c, const ViewState& view) const {
  int64_t min_clock = INT64_MAX;
  for (uint64_t w : view.workers) {
    auto it = c.clocks.find(w);
    // A live worker not yet seen on this chunk has pushed nothing: clock 0.
    min_clock = std::min(min_clock, it == c.clocks.end() ? 0 : it->second);
  }
  return min_clock == INT64_MAX ? 0 : min_clock;
}

}  // namespace strata

namespace strata {

absl::Status Shard::CheckGeneration(const Chunk& c, uint64_t generation) {
  if (generation == c.generation) return absl::OkStatus();
  counters_.aborted_rolled_back++;
  return absl::AbortedError(
      absl::StrCat("computed in rollback generation ", generation,
                   " but chunk ", c.spec.chunk_id(), " is in generation ",
                   c.generation, " (the job rolled back to step ",
                   c.generation_step, "): go on from that step"));
}

absl::StatusOr<PullResult> Shard::Pull(const v1::PullRequest& req,
                                       std::string* out) {
  return Pull(req, [out](size_t n) {
    out->resize(n);
    return out->data();
  });
}

absl::StatusOr<PullResult> Shard::Pull(const v1::PullRequest& req,
                                       PayloadAllocator alloc) {
  STRATA_ASSIGN_OR_RETURN(Chunk * c, FindChunk(req.chunk_id()));
  return PullChunk(c, req, alloc);
}

absl::StatusOr<PullResult> Shard::PullChunk(Chunk* c,
                                            const v1::PullRequest& req,
                                            PayloadAllocator alloc) {
  if (req.dtype() != v1::DTYPE_F32 && req.dtype() != v1::DTYPE_BF16 &&
      req.dtype() != v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown pull dtype ", req.dtype()));
  }
  if (req.clock() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull clock ", req.clock(), ": a step (>= 0), or -1 for none"));
  }
  counters_.pulls++;
  const uint64_t arrival = ++pull_arrivals_;
  STRATA_RETURN_IF_ERROR(AwaitGeneration(req.generation()));
  const Consistency& mode = options_.consistency;
  const uint64_t member = req.member_id();
  auto is_worker = [this, member] {
    const ViewState now = view();
    return std::binary_search(now.workers.begin(), now.workers.end(), member);
  };
  const bool worker = is_worker();
  uint64_t need_version = req.min_version();
  // Once waiting, a BSP worker's pull pins the chunk's tile in RAM
  // (Chunk::pull_waiters) until it has copied it; unpinned after the lock
  // is let go.
  bool pinned = false;
  absl::Cleanup unpin = [&] {
    if (pinned) Unpin(*c);
  };
  absl::MutexLock lock(&c->mu);
  if (mode.mode == Consistency::kBsp && worker && req.clock() >= 0) {
    // Step `clock` cannot close before this worker pushes it, so a version
    // beyond its clock can never come.
    if (req.min_version() > static_cast<uint64_t>(req.clock())) {
      return absl::OutOfRangeError(absl::StrCat(
          "pull of chunk ", req.chunk_id(), " for version ", req.min_version(),
          " can never be served: the requester at clock ", req.clock(),
          " must push step ", req.clock(), " first"));
    }
    need_version = std::max<uint64_t>(need_version, req.clock());
  }
  // Steps close one at a time: a wait for one this far off is an error
  // (or hostile), not a wait.
  const uint64_t ahead = options_.max_steps_ahead;
  if (need_version > c->rec.version + ahead ||
      (mode.mode == Consistency::kSsp && worker && req.clock() >= 0 &&
       static_cast<uint64_t>(req.clock()) >
           c->rec.version + ahead + mode.staleness)) {
    return absl::OutOfRangeError(
        absl::StrCat("pull of chunk ", req.chunk_id(), " for version ",
                     need_version, " at clock ", req.clock(),
                     " can never be served: the chunk is at "
                     "version ",
                     c->rec.version));
  }
  if (mode.mode == Consistency::kSsp && worker && req.clock() >= 0) {
    c->clocks.try_emplace(member, req.clock());
  }
  if (worker && req.clock() >= 0 && req.generation() == c->generation) {
    NotePullOfStep(*c, req.clock(), arrival);
  }
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) {
    if (c->rec.version < need_version) return false;
    if (mode.mode != Consistency::kSsp || !worker || req.clock() < 0)
      return true;
    return MinClock(*c, view()) >= req.clock() - mode.staleness;
  };
  // BSP: a pull still waiting for a step its requester computed under an
  // older set of workers waits for a step that is being redone.
  auto redone = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) {
    // (Also for a requester no longer in the view: a fenced worker's pull
    // under its old id redoes its step under its new one.)
    return mode.mode == Consistency::kBsp && req.epoch() > 0 &&
           c->rec.version < need_version && view().workers_epoch > req.epoch();
  };
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.max_wait;
  bool waited = false;
  const uint64_t waiter = worker ? member : 0;
  // Counts the wait however the loop ends (served, refused or timed out).
  auto count_wait = absl::MakeCleanup([&] {
    if (!waited) return;
    counters_.gate_waits++;
    counters_.gate_wait_ns += absl::ToInt64Nanoseconds(absl::Now() - start);
    counters_.pulls_waiting--;
    absl::MutexLock w(&waiting_mu_);
    if (--waiting_[waiter] == 0) waiting_.erase(waiter);
  });
  for (;;) {
    // Before `ready`: a rolled-back chunk may be at the version wanted, but
    // not with the weights this requester's step came from.
    STRATA_RETURN_IF_ERROR(CheckGeneration(*c, req.generation()));
    if (ready()) break;
    if (cancelled_)
      return absl::UnavailableError("the server is shutting down");
    if (mode.mode == Consistency::kBsp && worker && req.clock() > 0 &&
        CommitFailed(member, req.clock() - 1)) {
      // Pulled while its commit was applying, and the commit failed.
      counters_.aborted_stale_epoch++;
      return absl::AbortedError(absl::StrCat(
          "pull of chunk ", req.chunk_id(), ": this worker's commit of step ",
          req.clock() - 1,
          " failed on this server, so the step cannot close; redo it"));
    }
    if (redone()) {
      counters_.aborted_stale_epoch++;
      return absl::AbortedError(absl::StrCat(
          "step ", c->rec.version, " of chunk ", req.chunk_id(),
          " was computed in view epoch ", req.epoch(),
          " but the live workers changed since; redo it with the new view's "
          "shares"));
    }
    if (!waited) {
      absl::MutexLock w(&waiting_mu_);
      const int cap = worker ? options_.max_waiting_pulls_per_worker
                             : options_.max_waiting_pulls_others;
      if (waiting_[waiter] >= cap) {
        if (waiting_[waiter] == 0) waiting_.erase(waiter);
        counters_.rejected_busy++;
        return absl::ResourceExhaustedError(absl::StrCat(
            "pull of chunk ", req.chunk_id(), ": ", cap, " pulls of ",
            worker ? absl::StrCat("worker ", member) : "non-workers",
            " wait at the gate already"));
      }
      ++waiting_[waiter];
      waited = true;
      counters_.pulls_waiting++;
      // A BSP worker's: a commit will serve it, most often the one
      // applying now (under SSP it waits for the slowest worker, and a
      // pin would hold the tile past the budget that long).
      if (mode.mode == Consistency::kBsp && worker) {
        c->pull_waiters++;
        pinned = true;
      }
    }
    if (c->changed.WaitWithDeadline(&c->mu, deadline) && !ready()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "pull of chunk ", req.chunk_id(), " waited ",
          absl::FormatDuration(options_.max_wait), " at the gate (version ",
          c->rec.version, ", wanted ", need_version, ")"));
    }
  }
  ChunkRecord from_disk;
  STRATA_ASSIGN_OR_RETURN(const float* weights, WeightsToPull(*c, &from_disk));
  PullResult result;
  result.version = c->rec.version;
  result.min_clock = MinClock(*c, view());
  const size_t n = c->spec.numel();
  const size_t bytes = n * ElementBytes(req.dtype());
  char* out = alloc(bytes);
  if (out == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the pull's destination cannot hold chunk ",
                     req.chunk_id(), "'s ", bytes, " bytes"));
  }
  if (req.dtype() == v1::DTYPE_BF16) {
    FloatToBf16(weights, reinterpret_cast<uint16_t*>(out), n);
  } else {
    std::memcpy(out, weights, bytes);
  }
  counters_.bytes_out += bytes;
  return result;
}

}  // namespace strata
