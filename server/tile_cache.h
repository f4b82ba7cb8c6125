// The shard's side of the RAM tier (ShardOptions::spill): which tiles are
// resident, reading them back on use, reading ahead in the learned order
// (with SpillOptions::Eviction::kJustUsed only when a depth is given),
// keeping tiles for the BSP pulls waiting on them, and spilling
// (SpillStore::Victims: the least recently used, the one needed last, or
// the one used last) while the budget is passed. Without a spill store
// every tile stays in RAM and each call is a no-op or a plain read.
//
// A tile is a chunk's weights and optimizer state (rec.weights, rec.slots);
// its version, spec and BSP state stay in RAM. It moves only under its
// chunk's lock, so a push, pull or capture sees it whole. Spilling takes a
// victim's lock with TryLock, holding no other chunk's, so two threads
// making room can never wait on each other; a tile in use is skipped.
// Only updates (SSP/ASP pushes; under BSP the push that closes a step,
// which applies it and makes room after its use, where an SSP/ASP push
// makes it before) bring a tile into RAM, touch it and lead the
// read-ahead: a pull of a spilled tile reads its weights alone, a
// third of an Adam tile, and leaves it on disk. So the recency and the
// learned order are the updates' (backward order, every step), and the
// read-ahead brings whole tiles only for the updates that need them.
#ifndef STRATA_SERVER_TILE_CACHE_H_
#define STRATA_SERVER_TILE_CACHE_H_

#include <atomic>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/thread_pool.h"
#include "server/chunk.h"
#include "server/chunk_table.h"
#include "storage/chunk_tier.h"
#include "storage/spill_store.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Thread-safe. Owns the tier's threads; the table must outlive it.
class TileCache {
 public:
  // `spill` null: every tile stays in RAM.
  TileCache(std::shared_ptr<SpillStore> spill, const ChunkTable& table);
  ~TileCache();

  bool enabled() const { return spill_ != nullptr; }
  const SpillStore* spill() const { return spill_.get(); }

  // Takes a new chunk's tile: resident, or straight to disk when the
  // budget is full already (RESOURCE_EXHAUSTED if the disk refuses it).
  absl::Status AdmitNew(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Makes c's tile resident (reading it back if spilled) and counts the
  // use; DATA_LOSS (lost state) if it cannot be read.
  absl::Status Resident(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // c's tile was replaced whole in RAM (a rollback): counts it resident.
  void Replaced(Chunk& c, bool was_resident)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // The weights a pull of c answers with: the resident tile's, or, for a
  // spilled tile, its weights read alone into `scratch` (the tile stays on
  // disk). Counts the use; DATA_LOSS (lost state) if they cannot be read.
  absl::StatusOr<const float*> WeightsToPull(Chunk& c, ChunkRecord* scratch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // A spilled chunk's record as it would be resident (for captures).
  absl::StatusOr<ChunkRecord> TileCopy(const Chunk& c) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

  // Before locking c for a use: room for its tile if it is spilled.
  void BeforeUse(const Chunk& c);
  // After a use, no lock held: reads ahead the tiles expected next, spills
  // while the budget is passed, and starts a write-behind.
  void AfterUse(const Chunk& c);
  // Spills tiles in SpillStore::Victims order until `extra` more bytes fit;
  // whether they do. With `for_read_ahead`, tiles read ahead and not yet used
  // stay. Tiles pulls wait on stay too, up to SpillStore::pinned_bytes of
  // them, their bytes let past the budget.
  bool MakeRoom(size_t extra, bool for_read_ahead = false);
  // A BSP pull waits on c: its tile stays in RAM until Unpin.
  void Pin(Chunk& c) { c.pull_waiters++; }
  // A pull that waited on c is done with it (no lock held): the last one
  // makes room, on the I/O threads, if c's tile was kept past the budget.
  void Unpin(Chunk& c);

  // An empty tier for captures and loaded snapshots: in RAM, or on the
  // spill disk (whose state may not fit in RAM).
  absl::StatusOr<std::unique_ptr<ChunkTier>> NewScratch() const;
  // Blocks until the reads ahead and writes behind queued so far are done.
  void WaitForIo();
  void FillStats(v1::StatsResponse* out) const;

  // Called when a spilled tile cannot be read back, or comes back at
  // another version (the request that met it fails with that DATA_LOSS).
  using LostStateSink = std::function<void(const absl::Status&)>;
  void set_lost_state_sink(LostStateSink sink);
  // Tells the lost-state sink about `why`; returns it.
  absl::Status LostState(absl::Status why) const;
  // Called when the spill disk fails a write with an I/O error (not for
  // room): the tile stays in RAM, whole, and the shard may run over its
  // budget.
  using DiskErrorSink = std::function<void(const absl::Status&)>;
  void set_disk_error_sink(DiskErrorSink sink);

 private:
  // Writes out the changed tiles among the next to be spilled (the first
  // of SpillStore::Victims, the spill options' write_behind_bytes of them),
  // keeping them resident: on the writer thread.
  void WriteBehind();
  // Reads `next`'s tile ahead of its use (on an I/O thread).
  void ReadAhead(Chunk* next);
  // Runs `task` on `pool`, counted in tasks_ (WaitForIo).
  void Schedule(ThreadPool& pool, std::function<void()> task);
  // Writes c's tile out (unless the spilled copy is current) and frees it.
  absl::Status Spill(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Reads c's spilled tile into `rec` (at c's version: rec->version);
  // DATA_LOSS if it cannot be read or does not fit (callers decide whether
  // that is lost state).
  absl::Status ReadTileInto(const Chunk& c, ChunkRecord* rec) const;

  const std::shared_ptr<SpillStore> spill_;
  const ChunkTable& table_;
  mutable absl::Mutex lost_state_mu_;
  LostStateSink lost_state_sink_ ABSL_GUARDED_BY(lost_state_mu_);
  DiskErrorSink disk_error_sink_ ABSL_GUARDED_BY(lost_state_mu_);
  // Tells the disk-error sink about a failed write `s` if it was the
  // disk's I/O error (IsDiskIoError), not a full disk or a busy database.
  void DiskError(const absl::Status& s) const;
  absl::Mutex tasks_mu_;
  // Read-aheads, write-behinds and Unpin's MakeRoom queued or running.
  int tasks_ ABSL_GUARDED_BY(tasks_mu_) = 0;
  std::atomic<bool> writing_behind_{false};  // one write-behind at a time
  std::atomic<bool> unpinning_{false};       // one Unpin's MakeRoom at a time
  // Reads ahead, and writes behind on a thread of its own, so a write never
  // holds up a read. Declared last, so they are joined first, while what
  // their tasks use still exists. Null without a spill store.
  std::unique_ptr<ThreadPool> io_;
  std::unique_ptr<ThreadPool> writer_;
};

}  // namespace strata

#endif  // STRATA_SERVER_TILE_CACHE_H_
