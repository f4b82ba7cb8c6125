// One chunk as a shard holds it, and the shard's view of the job's workers:
// the state the shard's parts (server/shard.h) share. A chunk's record
// (weights, optimizer state, version) and the state each part keeps per
// chunk are guarded by the chunk's own lock; which part reads and writes
// what is said at each field.
#ifndef STRATA_SERVER_CHUNK_H_
#define STRATA_SERVER_CHUNK_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "optim/optimizer.h"
#include "optim/tensor_update.h"
#include "server/shard_options.h"
#include "storage/chunk_tier.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// An optimizer group: its spec as registered and the parameters parsed
// from it.
struct ChunkGroup {
  v1::GroupSpec spec;
  OptimizerParams params;
};

// One worker's push for an open BSP step (server/bsp_gate.h).
struct Contribution {
  uint64_t samples = 0;
  uint64_t first_sample = 0;
  uint64_t epoch = 0;       // the view epoch the step was computed in
  std::vector<float> grad;  // empty when `zero`
  bool zero = false;        // PushRequest.zero: a gradient of zeros
  bool whole_step = false;  // PushRequest.whole_step: closes the step
  // A deferred push's clipping factor (CommitRequest.scale), applied
  // when the step closes, in the same float multiply Commit would do.
  float scale = 1.0f;
};

// BSP, with an optimizer that needs sums over whole tensors (LAMB,
// Adafactor) and a tensor cut into several chunks: a closed step whose
// update waits for those sums (ps.proto Reduce), or, once applied, the
// partials of the chunk's last such step, which callers that come later
// may still ask for. Nothing in the chunk's record changes before the
// update is applied.
struct TensorSums {
  int64_t step = -1;  // -1: none
  bool applied = false;
  uint64_t epoch = 0;  // the view epoch the step was computed in
  // Of reductions 0..k (partials) and 0..k-1 (totals): reduction k waits
  // for its totals.
  std::vector<std::vector<double>> partials;
  std::vector<std::vector<double>> totals;
  std::vector<float> grad;  // the step's gradient, until applied
};

// Created by server/chunk_table.h and never destroyed while its shard
// lives, so a Chunk* found once stays valid.
struct Chunk {
  mutable absl::Mutex mu;
  absl::CondVar changed;  // signalled when a waiting pull should look again
  v1::ChunkSpec spec;     // immutable after creation
  const ChunkGroup* group = nullptr;  // immutable; owned by the table
  ChunkRecord rec ABSL_GUARDED_BY(mu);
  // BSP: pushes of the open step (step == rec.version), by member id.
  std::map<uint64_t, Contribution> open ABSL_GUARDED_BY(mu);
  // BSP: the step waiting for, or last applied with, its tensor's sums.
  TensorSums sums ABSL_GUARDED_BY(mu);
  // SSP/ASP: each worker's clock on this chunk (steps pushed).
  absl::flat_hash_map<uint64_t, int64_t> clocks ABSL_GUARDED_BY(mu);
  // SSP/ASP: what the last switch between asynchronous modes added to each
  // worker's clock here for SSP's bound (none: 0), so that the bound
  // counts from the switch (AspGate::Adopt) while `clocks` keep counting
  // pushes (a retry is found by them).
  absl::flat_hash_map<uint64_t, int64_t> lift ABSL_GUARDED_BY(mu);
  // A switch back to BSP took this chunk over (BspGate::Adopt) while the
  // SSP/ASP gate may still be current (Shard::AdoptChunks adopts every
  // chunk before switching): that gate must not apply a push to it.
  bool bsp_adopted ABSL_GUARDED_BY(mu) = false;
  // The rollback generation and the step it started from.
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  int64_t generation_step ABSL_GUARDED_BY(mu) = 0;
  // The tier (server/tile_cache.h): whether rec's weights and slots are in
  // RAM (written under mu, read without it as a hint), whether the spilled
  // copy equals them, and whether a read-ahead is queued.
  std::atomic<bool> resident{true};
  bool disk_current ABSL_GUARDED_BY(mu) = false;
  std::atomic<bool> prefetching{false};
  // Read ahead and not used since: a later read-ahead does not spill it
  // to make its own room (with a budget of a few tiles, read-aheads would
  // spill each other before their use, and read everything twice).
  std::atomic<bool> read_ahead{false};
  // BSP workers' pulls waiting at the gate for this chunk, until each
  // has copied the weights it answers with: the tier keeps the tile in RAM
  // for them (within SpillStore::pinned_bytes), so a commit's update serves
  // the next step's pulls before its tile is spilled.
  std::atomic<int> pull_waiters{0};
  // When the first worker's pull at each of the last two clocks came: the
  // order a worker asked for a step's weights in, which a deferred commit
  // of that step follows (BSP workers are at most a step apart, so a slow
  // worker's step is still here after a fast one's next pulls).
  struct PullArrival {
    int64_t clock = -1;
    uint64_t arrival = 0;
  };
  PullArrival step_pulls[2] ABSL_GUARDED_BY(mu);
  size_t tile_bytes = 0;  // immutable after creation

  // Notes the arrival of a worker's first pull at `clock` in step_pulls.
  void NotePullOfStep(int64_t clock, uint64_t arrival)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // When the first pull of `clock` came (0: not known).
  uint64_t PullArrivalOf(int64_t clock) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Marks the resident tile changed since it was last written out.
  void Dirty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { disk_current = false; }
  // Whether a closed step waits for its tensor's sums (TensorSums).
  bool AwaitingSums() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return sums.step >= 0 && !sums.applied;
  }
};

// The part of its tensor `c` is; `alone`: as its own tensor.
TensorPart PartOf(const Chunk& c, bool alone);
// Whether c's BSP updates wait for sums over other chunks of its tensor:
// its group's optimizer needs them and the tensor has other chunks.
bool WaitsForTensorSums(const Chunk& c);
// The lengths of a chunk's optimizer-state arrays (optim/tensor_update.h).
std::vector<uint64_t> StateSizesOf(const v1::ChunkSpec& spec,
                                   const OptimizerParams& params);
// Whether `slots` have those lengths.
bool StateFits(const std::vector<std::vector<float>>& slots,
               const v1::ChunkSpec& spec, const OptimizerParams& params);
// Zeroed state arrays of those lengths.
std::vector<std::vector<float>> ZeroState(const v1::ChunkSpec& spec,
                                          const OptimizerParams& params);
// Bytes of a chunk's weights and state.
uint64_t TileBytesOf(const v1::ChunkSpec& spec, const OptimizerParams& params);

// The shard's view of the job.
struct ShardView {
  uint64_t epoch = 0;
  uint64_t workers_epoch = 0;     // when the set of live workers last changed
  std::vector<uint64_t> workers;  // sorted
  absl::flat_hash_map<uint64_t, uint64_t>
      joined_epoch;  // worker -> epoch it joined at
  // Live workers with no samples left to lease (Member.drained), sorted.
  std::vector<uint64_t> drained;
  // The step of the job's last consistency switch (0: none).
  int64_t switch_step = 0;

  bool IsLive(uint64_t member) const {
    return std::binary_search(workers.begin(), workers.end(), member);
  }
  bool IsDrained(uint64_t member) const {
    return std::binary_search(drained.begin(), drained.end(), member);
  }
};

// ABORTED (counted in counters.aborted_rolled_back) unless `generation`
// is the chunk's.
absl::Status CheckChunkGeneration(const Chunk& c, uint64_t generation,
                                  ShardCounters& counters)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

// One optimizer update of `c` at the learning-rate schedule's `step` (its
// group's rule and schedule,
// the scheduled lr times `lr_factor`: an SSP/ASP push's PushRequest.
// async_lr_scale), whose gradient `form(begin, end, out)` writes block by
// block as the update reaches it (ApplyUpdateFormed): what forms the
// gradient from the pushes reads them once and makes no pass over memory
// of its own. Moves the version on, marks the tile changed and counts the
// update. LAMB and Adafactor update the chunk as its own tensor
// (PartOf(c, true): its norms and moments over its elements alone).
// REQUIRES: the tile is resident.
void ApplyChunkUpdate(
    Chunk& c, int64_t step,
    absl::FunctionRef<void(size_t begin, size_t end, float* out)> form,
    ShardCounters& counters, float lr_factor = 1.0f)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// The same with the gradient ready in `grad`.
void ApplyChunkUpdate(Chunk& c, int64_t step, const float* grad,
                      ShardCounters& counters, float lr_factor = 1.0f)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
// The update of c.sums' step with every reduction's totals in (the
// learning-rate schedule at `schedule_step`): applies it as part of its
// tensor and keeps the partials (TensorSums.applied).
// REQUIRES: c.AwaitingSums(), the tile resident.
void ApplySummedUpdate(Chunk& c, int64_t schedule_step, ShardCounters& counters)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

}  // namespace strata

#endif  // STRATA_SERVER_CHUNK_H_
