// BSP auto-snapshots (ShardOptions::snapshot_every): the consistent cut of
// every chunk at a step, assembled as each chunk closes that step, and
// handed to the shard's snapshot sink once it holds every chunk.
#ifndef STRATA_SERVER_SNAPSHOT_CAPTURE_H_
#define STRATA_SERVER_SNAPSHOT_CAPTURE_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "server/chunk.h"
#include "server/chunk_table.h"
#include "server/shard_options.h"
#include "server/tile_cache.h"
#include "storage/chunk_tier.h"

namespace strata {

// Thread-safe. The tiles and the table must outlive it.
class SnapshotCapture {
 public:
  SnapshotCapture(const TileCache& tiles, const ChunkTable& table)
      : tiles_(tiles), table_(table) {}

  // Adds c's state (its version: the step it just closed) to that step's
  // cut; the chunk completing a cut calls the sink with it, on this
  // thread. A copy that fails drops that step's cut (a later one will
  // complete), logged.
  void Add(const Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Drops every pending cut; the next to complete is after `step`.
  void Reset(int64_t step);
  void set_sink(SnapshotSink sink);

 private:
  // Puts `copy` into the cut of `step`; the cut when that completes it.
  std::unique_ptr<ChunkTier> Put(int64_t step,
                                 absl::StatusOr<ChunkRecord> copy);

  const TileCache& tiles_;
  const ChunkTable& table_;
  absl::Mutex mu_;
  SnapshotSink sink_ ABSL_GUARDED_BY(mu_);
  // step -> captured chunks so far.
  std::map<int64_t, std::unique_ptr<ChunkTier>> pending_ ABSL_GUARDED_BY(mu_);
  int64_t last_captured_step_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace strata

#endif  // STRATA_SERVER_SNAPSHOT_CAPTURE_H_
