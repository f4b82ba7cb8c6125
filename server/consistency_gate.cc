#include "server/consistency_gate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/async_gate.h"
#include "server/bsp_gate.h"

namespace strata {

std::unique_ptr<ConsistencyGate> ConsistencyGate::Create(
    GateParts parts, const Consistency& mode) {
  switch (mode.mode) {
    case Consistency::kBsp:
      return std::make_unique<BspGate>(parts);
    case Consistency::kSsp:
      return std::make_unique<SspGate>(parts, mode.staleness);
    case Consistency::kAsp:
      break;
  }
  return std::make_unique<AspGate>(parts);
}

int64_t ConsistencyGate::MinClock(const Chunk& c, const ShardView& view) {
  int64_t min_clock = INT64_MAX;
  for (uint64_t w : view.workers) {
    auto it = c.clocks.find(w);
    // A live worker not yet seen on this chunk has pushed nothing: clock 0.
    min_clock = std::min(min_clock, it == c.clocks.end() ? 0 : it->second);
  }
  return min_clock == INT64_MAX ? 0 : min_clock;
}

int64_t ConsistencyGate::MinWorkingClock(const Chunk& c,
                                         const ShardView& view) {
  int64_t min_clock = INT64_MAX;
  for (uint64_t w : view.workers) {
    if (!view.IsDrained(w)) min_clock = std::min(min_clock, LiftedClock(c, w));
  }
  return min_clock;
}

int64_t ConsistencyGate::LiftedClock(const Chunk& c, uint64_t worker) {
  auto clock = c.clocks.find(worker);
  auto lift = c.lift.find(worker);
  return (clock == c.clocks.end() ? 0 : clock->second) +
         (lift == c.lift.end() ? 0 : lift->second);
}

absl::Status ConsistencyGate::CheckReachable(const Chunk& c,
                                             const v1::PullRequest& req,
                                             uint64_t need) const {
  // Steps close one at a time: a wait for one this far off is an error
  // (or hostile), not a wait.
  if (need <= c.rec.version + parts_.options.max_steps_ahead) {
    return absl::OkStatus();
  }
  return Unreachable(c, req, need);
}

absl::Status ConsistencyGate::Unreachable(const Chunk& c,
                                          const v1::PullRequest& req,
                                          uint64_t need) {
  return absl::OutOfRangeError(absl::StrCat(
      "pull of chunk ", req.chunk_id(), " for version ", need, " at clock ",
      req.clock(), " can never be served: the chunk is at version ",
      c.rec.version));
}

void ConsistencyGate::NoteApplied(const Chunk& c, int64_t step, uint64_t worker,
                                  uint64_t epoch) {
  parts_.applied.Note(c.generation, step, worker, epoch, parts_.table.size());
}

}  // namespace strata
