#include "server/async_gate.h"

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace strata {

absl::Status AspGate::CheckPushEpoch(const ShardView& view,
                                     const v1::PushRequest& req) const {
  auto it = view.joined_epoch.find(req.member_id());
  const uint64_t joined = it == view.joined_epoch.end() ? 0 : it->second;
  if (req.epoch() < joined) {
    return absl::AbortedError(
        absl::StrCat("push stamped with epoch ", req.epoch(),
                     " is stale: member ", req.member_id(), " joined at epoch ",
                     joined, "; refresh the view and retry the step"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::PushResponse> AspGate::Push(Chunk& c,
                                               const v1::PushRequest& req,
                                               std::vector<float> grad,
                                               float scale) {
  parts_.tiles.BeforeUse(c);
  absl::Cleanup after = [&] { parts_.tiles.AfterUse(c); };
  absl::StatusOr<v1::PushResponse> r = ApplyNow(c, req, grad, scale);
  parts_.pool.Give(std::move(grad));
  return r;
}

absl::StatusOr<v1::PushResponse> AspGate::ApplyNow(
    Chunk& c, const v1::PushRequest& req, const std::vector<float>& grad,
    float scale) {
  absl::MutexLock lock(&c.mu);
  STRATA_RETURN_IF_ERROR(
      CheckChunkGeneration(c, req.generation(), parts_.counters));
  STRATA_RETURN_IF_ERROR(parts_.tiles.Resident(c));
  if (c.bsp_adopted) {
    // A switch back to BSP is under way on this shard: the push goes to
    // the BSP gate once it is current (a BSP step's push), or changes
    // nothing there (a retried SSP/ASP one: an old step).
    return absl::UnavailableError(
        absl::StrCat("chunk ", req.chunk_id(), " went back to BSP; ask again"));
  }
  const ShardView now = parts_.membership.Get();
  if (!now.IsLive(req.member_id())) {
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
  const int64_t schedule_step = parts_.membership.ScheduleStep(req.step());
  const float lr_factor =
      req.async_lr_scale() > 0 ? req.async_lr_scale() : 1.0f;
  if (req.zero()) {
    // Nothing to apply (an expert none of this worker's tokens reached):
    // the weights, their state and the version stay; the clock moves.
  } else if (scale == 1.0f) {
    ApplyChunkUpdate(c, schedule_step, g, parts_.counters, lr_factor);
  } else {
    ApplyChunkUpdate(
        c, schedule_step,
        [g, scale](size_t begin, size_t end, float* out) {
          for (size_t i = begin; i < end; ++i) out[i - begin] = g[i] * scale;
        },
        parts_.counters, lr_factor);
  }
  NoteApplied(c, req.step(), req.member_id(), req.epoch());
  auto [it, fresh] = c.clocks.try_emplace(req.member_id(), 0);
  it->second = std::max(it->second, req.step() + 1);
  if (fresh) LevelNewcomer(c, req.member_id());
  c.changed.SignalAll();
  resp.set_version(c.rec.version);
  resp.set_applied(true);
  return resp;
}

void AspGate::Adopt(Chunk& c, const ShardView& now, const Consistency& from) {
  if (from.mode != Consistency::kBsp) {
    // Level: the lifted clocks of the live workers seen here all become
    // the largest (a worker's own pushes still count in c.clocks).
    int64_t top = INT64_MIN;
    for (uint64_t w : now.workers) {
      if (c.clocks.contains(w)) top = std::max(top, LiftedClock(c, w));
    }
    c.lift.clear();
    for (uint64_t w : now.workers) {
      if (auto it = c.clocks.find(w); it != c.clocks.end())
        c.lift[w] = top - it->second;
    }
    return;
  }
  c.bsp_adopted = false;
  const auto version = static_cast<int64_t>(c.rec.version);
  for (uint64_t w : now.workers) {
    int64_t& clock = c.clocks[w];
    clock = std::max(clock, version);
  }
  c.lift.clear();  // level at the version
  for (auto& [id, contrib] : c.open) parts_.pool.Give(std::move(contrib.grad));
  c.open.clear();
}

void AspGate::LevelNewcomer(Chunk& c, uint64_t member) const {
  if (c.lift.empty()) return;  // no switch between asynchronous modes
  const ShardView view = parts_.membership.Get();
  int64_t slowest = INT64_MAX;
  for (uint64_t w : view.workers) {
    if (w != member && !view.IsDrained(w) && c.clocks.contains(w))
      slowest = std::min(slowest, LiftedClock(c, w));
  }
  const int64_t clock = c.clocks.at(member);
  if (slowest != INT64_MAX && slowest > clock) c.lift[member] = slowest - clock;
}

void AspGate::Sweep(Chunk& c, const ShardView& now) {
  auto gone = [&](const auto& kv) { return !now.IsLive(kv.first); };
  absl::erase_if(c.clocks, gone);
  absl::erase_if(c.lift, gone);
}

absl::StatusOr<uint64_t> AspGate::PullTarget(Chunk& c,
                                             const v1::PullRequest& req,
                                             bool worker) {
  STRATA_RETURN_IF_ERROR(CheckReachable(c, req, req.min_version()));
  return req.min_version();
}

absl::StatusOr<uint64_t> SspGate::PullTarget(Chunk& c,
                                             const v1::PullRequest& req,
                                             bool worker) {
  STRATA_ASSIGN_OR_RETURN(uint64_t need, AspGate::PullTarget(c, req, worker));
  if (!worker || req.clock() < 0) return need;
  // Clocks move one step at a time, as versions do.
  if (static_cast<uint64_t>(req.clock()) >
      c.rec.version + parts_.options.max_steps_ahead + staleness_) {
    return Unreachable(c, req, need);
  }
  if (c.clocks.try_emplace(req.member_id(), req.clock()).second) {
    LevelNewcomer(c, req.member_id());
  }
  return need;
}

bool SspGate::Ready(const Chunk& c, const v1::PullRequest& req, bool worker,
                    uint64_t need) const {
  if (c.rec.version < need) return false;
  if (!worker || req.clock() < 0) return true;
  const auto lift = c.lift.find(req.member_id());
  const int64_t own = req.clock() + (lift == c.lift.end() ? 0 : lift->second);
  return MinWorkingClock(c, parts_.membership.Get()) >= own - staleness_;
}

}  // namespace strata
