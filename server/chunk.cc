#include "server/chunk.h"

#include "absl/strings/str_cat.h"

namespace strata {

void Chunk::NotePullOfStep(int64_t clock, uint64_t arrival) {
  if (step_pulls[0].clock == clock || step_pulls[1].clock == clock) return;
  // Keeps the step before (a slower worker may still commit it) and
  // replaces the other: a clock that jumped back (a rollback, a redo)
  // leaves no stale entry behind for long.
  const int replace = step_pulls[0].clock == clock - 1 ? 1 : 0;
  step_pulls[replace] = {clock, arrival};
}

uint64_t Chunk::PullArrivalOf(int64_t clock) const {
  uint64_t pulled = 0;
  for (const PullArrival& p : step_pulls) {
    if (p.clock == clock) pulled = p.arrival;
  }
  return pulled;
}

absl::Status CheckChunkGeneration(const Chunk& c, uint64_t generation,
                                  ShardCounters& counters) {
  if (generation == c.generation) return absl::OkStatus();
  counters.aborted_rolled_back++;
  return absl::AbortedError(
      absl::StrCat("computed in rollback generation ", generation,
                   " but chunk ", c.spec.chunk_id(), " is in generation ",
                   c.generation, " (the job rolled back to step ",
                   c.generation_step, "): go on from that step"));
}

namespace {

void Applied(Chunk& c, ShardCounters& counters)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  c.rec.version++;
  c.Dirty();
  counters.pushes_applied++;
}

}  // namespace

void ApplyChunkUpdate(
    Chunk& c, int64_t step,
    absl::FunctionRef<void(size_t begin, size_t end, float* out)> form,
    ShardCounters& counters) {
  const OptimizerParams& p = c.group->params;
  float* m = c.rec.slots.size() > 0 ? c.rec.slots[0].data() : nullptr;
  float* v = c.rec.slots.size() > 1 ? c.rec.slots[1].data() : nullptr;
  ApplyUpdateFormed(p, ScheduledLr(p, step),
                    static_cast<int64_t>(c.rec.version) + 1,
                    c.rec.weights.data(), m, v, c.rec.weights.size(), form);
  Applied(c, counters);
}

void ApplyChunkUpdate(Chunk& c, int64_t step, const float* grad,
                      ShardCounters& counters) {
  const OptimizerParams& p = c.group->params;
  float* m = c.rec.slots.size() > 0 ? c.rec.slots[0].data() : nullptr;
  float* v = c.rec.slots.size() > 1 ? c.rec.slots[1].data() : nullptr;
  ApplyUpdate(p, ScheduledLr(p, step), static_cast<int64_t>(c.rec.version) + 1,
              c.rec.weights.data(), m, v, grad, c.rec.weights.size());
  Applied(c, counters);
}

}  // namespace strata
