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

TensorPart PartOf(const Chunk& c, bool alone) {
  return PartOfTensor(c.group->params, c.spec.numel(), c.spec.tensor_shape(),
                      alone);
}

bool WaitsForTensorSums(const Chunk& c) {
  if (!UsesTensorSums(c.group->params)) return false;
  const TensorPart part = PartOf(c, false);
  return part.numel != part.tensor_numel;
}

std::vector<uint64_t> StateSizesOf(const v1::ChunkSpec& spec,
                                   const OptimizerParams& params) {
  return StateSizes(
      params, PartOfTensor(params, spec.numel(), spec.tensor_shape(), false));
}

bool StateFits(const std::vector<std::vector<float>>& slots,
               const v1::ChunkSpec& spec, const OptimizerParams& params) {
  const std::vector<uint64_t> sizes = StateSizesOf(spec, params);
  if (slots.size() != sizes.size()) return false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (slots[i].size() != sizes[i]) return false;
  }
  return true;
}

std::vector<std::vector<float>> ZeroState(const v1::ChunkSpec& spec,
                                          const OptimizerParams& params) {
  std::vector<std::vector<float>> slots;
  for (uint64_t size : StateSizesOf(spec, params)) slots.emplace_back(size);
  return slots;
}

uint64_t TileBytesOf(const v1::ChunkSpec& spec, const OptimizerParams& params) {
  uint64_t floats = spec.numel();
  for (uint64_t size : StateSizesOf(spec, params)) floats += size;
  return floats * sizeof(float);
}

namespace {

// An update of c as its own tensor, with the gradient in g.
void ApplyAlone(Chunk& c, int64_t step, float lr_factor, const float* g)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const OptimizerParams& p = c.group->params;
  ApplyWholeTensorUpdate(
      {&p, lr_factor * ScheduledLr(p, step),
       static_cast<int64_t>(c.rec.version) + 1, PartOf(c, true)},
      c.rec.weights.data(), absl::MakeSpan(c.rec.slots), g);
}

}  // namespace

void ApplyChunkUpdate(
    Chunk& c, int64_t step,
    absl::FunctionRef<void(size_t begin, size_t end, float* out)> form,
    ShardCounters& counters, float lr_factor) {
  const OptimizerParams& p = c.group->params;
  if (UsesTensorSums(p)) {
    std::vector<float> g(c.rec.weights.size());
    form(0, g.size(), g.data());
    ApplyAlone(c, step, lr_factor, g.data());
    Applied(c, counters);
    return;
  }
  float* m = c.rec.slots.size() > 0 ? c.rec.slots[0].data() : nullptr;
  float* v = c.rec.slots.size() > 1 ? c.rec.slots[1].data() : nullptr;
  ApplyUpdateFormed(p, lr_factor * ScheduledLr(p, step),
                    static_cast<int64_t>(c.rec.version) + 1,
                    c.rec.weights.data(), m, v, c.rec.weights.size(), form);
  Applied(c, counters);
}

void ApplyChunkUpdate(Chunk& c, int64_t step, const float* grad,
                      ShardCounters& counters, float lr_factor) {
  const OptimizerParams& p = c.group->params;
  if (UsesTensorSums(p)) {
    ApplyAlone(c, step, lr_factor, grad);
    Applied(c, counters);
    return;
  }
  float* m = c.rec.slots.size() > 0 ? c.rec.slots[0].data() : nullptr;
  float* v = c.rec.slots.size() > 1 ? c.rec.slots[1].data() : nullptr;
  ApplyUpdate(p, lr_factor * ScheduledLr(p, step),
              static_cast<int64_t>(c.rec.version) + 1, c.rec.weights.data(), m,
              v, grad, c.rec.weights.size());
  Applied(c, counters);
}

void ApplySummedUpdate(Chunk& c, int64_t schedule_step,
                       ShardCounters& counters) {
  const OptimizerParams& p = c.group->params;
  TensorSums& sums = c.sums;
  ApplyTensorUpdate({&p, ScheduledLr(p, schedule_step),
                     static_cast<int64_t>(c.rec.version) + 1, PartOf(c, false)},
                    c.rec.weights.data(), absl::MakeSpan(c.rec.slots),
                    sums.grad.data(), sums.totals);
  sums.applied = true;
  Applied(c, counters);
}

}  // namespace strata
