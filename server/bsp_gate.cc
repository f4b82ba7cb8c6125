#include "server/bsp_gate.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace strata {

absl::StatusOr<v1::PushResponse> BspGate::Push(Chunk& c,
                                               const v1::PushRequest& req,
                                               std::vector<float> grad,
                                               float scale) {
  // Only the push that closes the step reads the tile (MaybeCloseStep):
  // room is made after it (AfterUse), not before every push, which would
  // spill a tile for each push that reads none.
  absl::StatusOr<v1::PushResponse> r = Collect(c, req, std::move(grad), scale);
  if (r.ok() && r->applied()) parts_.tiles.AfterUse(c);
  return r;
}

absl::Status BspGate::CheckPush(const Chunk& c, const v1::PushRequest& req,
                                const ShardView& now) const {
  STRATA_RETURN_IF_ERROR(
      CheckChunkGeneration(c, req.generation(), parts_.counters));
  if (!now.IsLive(req.member_id())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", req.member_id(), " left the view (epoch ", now.epoch, ")"));
  }
  // The step's shares were cut for an older set of workers. Checked under
  // the chunk's lock, so a view change's sweep of this chunk comes either
  // before (refused here) or after (dropped by the sweep).
  if (req.epoch() < now.workers_epoch) {
    parts_.counters.aborted_stale_epoch++;
    return absl::AbortedError(absl::StrCat(
        "step ", req.step(), " was computed in view epoch ", req.epoch(),
        " but the live workers changed at epoch ", now.workers_epoch,
        "; redo the step with the new view's shares"));
  }
  const int64_t open_step = static_cast<int64_t>(c.rec.version);
  if (req.step() > open_step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push for step ", req.step(), " but chunk ", req.chunk_id(),
        " is at step ", open_step, ": pull version ", req.step(),
        " before computing that step"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::PushResponse> BspGate::Collect(Chunk& c,
                                                  const v1::PushRequest& req,
                                                  std::vector<float> grad,
                                                  float scale) {
  absl::MutexLock lock(&c.mu);
  // The view read under the chunk's lock: a view change sweeps each chunk
  // under its lock after publishing, so a push from a worker that has left
  // is either refused here or dropped by the sweep, never counted.
  const ShardView now = parts_.membership.Get();
  const absl::Status refused = CheckPush(c, req, now);
  // The tile stays where it is (a spilled one keeps its version in RAM):
  // only the push that closes the step needs it (MaybeCloseStep), so each
  // step reads a spilled tile once, not once per worker.
  const int64_t open_step = static_cast<int64_t>(c.rec.version);
  v1::PushResponse resp;
  resp.set_version(c.rec.version);
  // A step that closed on pushes that covered all of its samples (its
  // update may still wait for its tensor's sums): this one (a retry whose
  // reply was lost, or a redo of a step that had already closed here)
  // changes nothing.
  if (!refused.ok() || req.step() < open_step || c.AwaitingSums()) {
    parts_.pool.Give(std::move(grad));
    if (!refused.ok()) return refused;
    return resp;
  }
  if (req.whole_step()) {
    // The workers reduced the step among themselves: this push is all of
    // it, whatever else arrived for the step.
    ClearOpen(c);
  }
  // A retry of a counted push changes nothing; a redo (a newer epoch)
  // replaces what the member pushed before.
  auto [it, inserted] = c.open.try_emplace(req.member_id());
  if (inserted || it->second.epoch < req.epoch()) {
    if (!inserted) parts_.pool.Give(std::move(it->second.grad));
    it->second = Contribution{.samples = req.num_samples(),
                              .first_sample = req.first_sample(),
                              .epoch = req.epoch(),
                              .grad = std::move(grad),
                              .zero = req.zero(),
                              .whole_step = req.whole_step(),
                              .scale = scale};
  } else {
    parts_.pool.Give(std::move(grad));
  }
  const uint64_t before = c.rec.version;
  // An error reading the tile leaves the step open, this push counted; it
  // is lost state (TileCache::set_lost_state_sink), so a server stops and
  // the job goes on from its snapshot. (A Shard with no sink: a retry of
  // the push or the redo after a view change closes the step.)
  STRATA_RETURN_IF_ERROR(MaybeCloseStep(c, now));
  resp.set_version(c.rec.version);
  resp.set_applied(c.rec.version != before);
  return resp;
}

void BspGate::Adopt(Chunk& c, const ShardView& now, const Consistency& from) {
  if (from.mode == Consistency::kBsp) return;
  const auto step =
      static_cast<uint64_t>(std::max<int64_t>(now.switch_step, 0));
  // Until the BSP gate is current, the SSP/ASP one refuses pushes here
  // (UNAVAILABLE: asked again) and its SSP pulls, which wait on the clocks,
  // find every live worker at the switch's step.
  c.bsp_adopted = true;
  c.lift.clear();
  for (uint64_t w : now.workers) {
    int64_t& clock = c.clocks[w];
    clock = std::max(clock, static_cast<int64_t>(step));
  }
  if (c.rec.version >= step) {
    if (c.rec.version > step) {
      // The ledger's bound says this cannot be: the chunk's BSP steps
      // would not line up with the others'.
      spdlog::error(
          "strata server: chunk {} is at version {}, past the step {} the "
          "job goes back to BSP at",
          c.spec.chunk_id(), c.rec.version, step);
    }
    return;
  }
  // A spilled tile's copy carries its version: read it, so the next
  // write-out carries the new one.
  if (absl::Status s = parts_.tiles.Resident(c); !s.ok()) {
    spdlog::error("strata server: chunk {} cannot go back to BSP: {}",
                  c.spec.chunk_id(), s.ToString());
    return;  // lost state: TileCache::set_lost_state_sink
  }
  c.rec.version = step;
  c.Dirty();
}

void BspGate::Sweep(Chunk& c, const ShardView& now) {
  // (A tile that cannot be read leaves the step open: logged.)
  (void)MaybeCloseStep(c, now);
}

absl::Status BspGate::MaybeCloseStep(Chunk& c, const ShardView& view) {
  // Pushes of workers that left, and pushes cut for an older set of
  // workers, count for nothing: the step is redone without them.
  for (auto it = c.open.begin(); it != c.open.end();) {
    if (view.IsLive(it->first) && it->second.epoch >= view.workers_epoch) {
      ++it;
    } else {
      parts_.pool.Give(std::move(it->second.grad));
      it = c.open.erase(it);
    }
  }
  if (c.open.empty() || c.AwaitingSums()) return absl::OkStatus();
  const bool whole = c.open.size() == 1 && c.open.begin()->second.whole_step;
  for (uint64_t w : view.workers) {
    if (!whole && !c.open.contains(w)) return absl::OkStatus();
  }
  // The tile, read now if spilled.
  if (absl::Status s = parts_.tiles.Resident(c); !s.ok()) {
    spdlog::error("strata server: cannot close step {} of chunk {}: {}",
                  c.rec.version, c.spec.chunk_id(), s.ToString());
    return s;  // the step stays open: see Collect
  }
  CheckTiling(c);
  CloseStep(c);
  c.changed.SignalAll();
  if (!c.AwaitingSums()) AfterApply(c);
  return absl::OkStatus();
}

void BspGate::AfterApply(Chunk& c) {
  if (parts_.options.snapshot_every > 0 &&
      static_cast<int64_t>(c.rec.version) % parts_.options.snapshot_every ==
          0) {
    parts_.snapshots.Add(c);
  }
}

void BspGate::CloseStep(Chunk& c) {
  // Sample-weighted mean, summed in member-id order (std::map), so the
  // result does not depend on the order pushes arrived in.
  uint64_t total = 0, epoch = 0;
  for (const auto& [id, contrib] : c.open) {
    total += contrib.samples;
    epoch = std::max(epoch, contrib.epoch);
  }
  parts_.counters.bsp_samples_applied += total;
  // mean = 0 + the sum of weight * (g * scale), in member-id order: the
  // same float operations as scaling each gradient, zeroing a buffer and
  // adding them to it (g * 1 is g; 0 + x turns -0 into +0 as that did),
  // formed a block at a time as the update reaches it.
  struct Term {
    float weight, scale;
    const float* g;
  };
  // A zero push adds nothing but its samples to the mean's weights.
  std::vector<Term> terms;
  for (const auto& [id, contrib] : c.open) {
    if (contrib.zero) continue;
    terms.push_back(
        {static_cast<float>(static_cast<double>(contrib.samples) / total),
         contrib.scale, contrib.grad.data()});
  }
  const int64_t step = static_cast<int64_t>(c.rec.version);
  if (terms.empty()) {
    // No worker's tokens reached this chunk (an idle expert): the step
    // closes with no update, so its weights and moments stay as they were
    // (no decay of Adam's moments, no weight decay) rather than taking a
    // zero gradient's update. Adam's bias correction counts steps (the
    // version), as TensorFlow's LazyAdam does. With LAMB or Adafactor,
    // every chunk of the tensor skips alike (a worker's pushes of one
    // tensor are all zero or none is), and Reduce finds it applied.
    c.rec.version++;
    c.Dirty();
    parts_.counters.zero_steps++;
    NoteApplied(c, step, 0, epoch);
    ClearOpen(c);
    return;
  }
  auto form = [&terms](size_t begin, size_t end, float* out) {
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
  };
  if (WaitsForTensorSums(c)) {
    // The update waits for sums over the tensor's other chunks (Reduce):
    // the step's gradient is kept, and reduction 0's partials are ready.
    ResetSums(c);
    TensorSums& sums = c.sums;
    sums.step = step;
    sums.epoch = epoch;
    sums.grad = parts_.pool.Take(c.spec.numel());
    form(0, sums.grad.size(), sums.grad.data());
    sums.partials.push_back(PartialSums(SumsStep(c), 0, c.rec.weights.data(),
                                        c.rec.slots, sums.grad.data(), {}));
    ClearOpen(c);
    return;
  }
  ApplyChunkUpdate(c, parts_.membership.ScheduleStep(step), form,
                   parts_.counters);
  NoteApplied(c, step, 0, epoch);
  ClearOpen(c);
}

TensorStep BspGate::SumsStep(const Chunk& c) const {
  const OptimizerParams& p = c.group->params;
  return {&p, ScheduledLr(p, parts_.membership.ScheduleStep(c.sums.step)),
          static_cast<int64_t>(c.rec.version) + 1, PartOf(c, false)};
}

void BspGate::ResetSums(Chunk& c) {
  if (!c.sums.grad.empty()) parts_.pool.Give(std::move(c.sums.grad));
  c.sums = TensorSums();
}

absl::StatusOr<v1::ReducePartials> BspGate::Reduce(Chunk& c,
                                                   const v1::ReduceRequest& req,
                                                   const v1::ReduceChunk& in) {
  v1::ReducePartials out;
  out.set_chunk_id(c.spec.chunk_id());
  TensorSums& sums = c.sums;
  const int k = req.phase();
  if (sums.step != req.step()) {
    // Applied long ago (its partials are gone, and every chunk of its
    // tensor applied it: a chunk moves past a step only once every worker
    // pulled all of it), or never a step of sums here.
    if (c.rec.version > static_cast<uint64_t>(req.step()) &&
        WaitsForTensorSums(c)) {
      out.set_applied(true);
      return out;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "chunk ", c.spec.chunk_id(), " has no closed step ", req.step(),
        " waiting for its tensor's sums (version ", c.rec.version, ")"));
  }
  const int computed = static_cast<int>(sums.partials.size());
  if (k > computed) {
    return absl::FailedPreconditionError(
        absl::StrCat("reduction ", k, " of chunk ", c.spec.chunk_id(),
                     " asked before reduction ", computed));
  }
  if (k == computed && !sums.applied) {
    // The totals of reduction k-1: the first to come win (every caller
    // adds the same partials in the same order).
    if (static_cast<size_t>(in.totals_size()) != sums.partials[k - 1].size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reduction ", k - 1, " of chunk ", c.spec.chunk_id(), " has ",
          sums.partials[k - 1].size(), " sums, not ", in.totals_size()));
    }
    STRATA_RETURN_IF_ERROR(parts_.tiles.Resident(c));
    sums.totals.emplace_back(in.totals().begin(), in.totals().end());
    if (k < NumReductions(c.group->params, PartOf(c, false))) {
      sums.partials.push_back(PartialSums(SumsStep(c), k, c.rec.weights.data(),
                                          c.rec.slots, sums.grad.data(),
                                          sums.totals));
    } else {
      ApplySummedUpdate(c, parts_.membership.ScheduleStep(sums.step),
                        parts_.counters);
      parts_.counters.summed_updates++;
      parts_.pool.Give(std::move(sums.grad));
      sums.grad = {};
      NoteApplied(c, sums.step, 0, sums.epoch);
      c.changed.SignalAll();
      AfterApply(c);
      parts_.tiles.AfterUse(c);
    }
  }
  if (k < static_cast<int>(sums.partials.size())) {
    *out.mutable_partials() = {sums.partials[k].begin(),
                               sums.partials[k].end()};
  }
  out.set_applied(sums.applied);
  return out;
}

void BspGate::CheckTiling(const Chunk& c) {
  std::vector<std::pair<uint64_t, uint64_t>> runs;  // (first, count)
  for (const auto& [id, contrib] : c.open)
    runs.emplace_back(contrib.first_sample, contrib.samples);
  std::sort(runs.begin(), runs.end());
  for (size_t i = 1; i < runs.size(); ++i) {
    if (runs[i].first != runs[i - 1].first + runs[i - 1].second) {
      parts_.counters.bsp_tiling_errors++;
      spdlog::warn(
          "strata server: step {} of chunk {} closed on pushes that do not "
          "tile one run of samples ([{}, +{}) then [{}, +{}))",
          c.rec.version, c.spec.chunk_id(), runs[i - 1].first,
          runs[i - 1].second, runs[i].first, runs[i].second);
      return;
    }
  }
}

void BspGate::ClearOpen(Chunk& c) {
  for (auto& [id, contrib] : c.open) parts_.pool.Give(std::move(contrib.grad));
  c.open.clear();
}

absl::StatusOr<uint64_t> BspGate::PullTarget(Chunk& c,
                                             const v1::PullRequest& req,
                                             bool worker) {
  uint64_t need = req.min_version();
  if (worker && req.clock() >= 0) {
    // Step `clock` cannot close before this worker pushes it, so a version
    // beyond its clock can never come.
    if (req.min_version() > static_cast<uint64_t>(req.clock())) {
      return absl::OutOfRangeError(absl::StrCat(
          "pull of chunk ", req.chunk_id(), " for version ", req.min_version(),
          " can never be served: the requester at clock ", req.clock(),
          " must push step ", req.clock(), " first"));
    }
    need = std::max<uint64_t>(need, req.clock());
  }
  STRATA_RETURN_IF_ERROR(CheckReachable(c, req, need));
  return need;
}

absl::Status BspGate::CheckWaiting(const Chunk& c, const v1::PullRequest& req,
                                   bool worker, uint64_t need) const {
  if (worker && req.clock() > 0 &&
      parts_.failed_commits.Failed(req.member_id(), req.clock() - 1)) {
    // Pulled while its commit was applying, and the commit failed.
    parts_.counters.aborted_stale_epoch++;
    return absl::AbortedError(absl::StrCat(
        "pull of chunk ", req.chunk_id(), ": this worker's commit of step ",
        req.clock() - 1,
        " failed on this server, so the step cannot close; redo it"));
  }
  // A pull still waiting for a step its requester computed under an older
  // set of workers waits for a step that is being redone. (Also for a
  // requester no longer in the view: a fenced worker's pull under its old
  // id redoes its step under its new one.) Not a step that closed and
  // waits for its tensor's sums: that one is not redone.
  if (req.epoch() > 0 && c.rec.version < need && !c.AwaitingSums() &&
      parts_.membership.Get().workers_epoch > req.epoch()) {
    parts_.counters.aborted_stale_epoch++;
    return absl::AbortedError(absl::StrCat(
        "step ", c.rec.version, " of chunk ", req.chunk_id(),
        " was computed in view epoch ", req.epoch(),
        " but the live workers changed since; redo it with the new view's "
        "shares"));
  }
  return absl::OkStatus();
}

}  // namespace strata
