// The servers' ZeRO-Infinity tier: a RAM budget for chunk tiles (a chunk's
// weights, optimizer state and version, resident or spilled together)
// with the tiles that do not fit spilled to RocksDB on the server's disk.
//
// SpillStore keeps the books and does the I/O; it does not own the tiles.
// The shard (server/tile_cache.h) owns each tile under the chunk's lock
// and calls in here: Admit when a tile becomes resident, Touch on each use
// (each update: pulls do not touch), Release when it spills one, Victims
// to choose what to spill, Write and Read to move a tile. It also learns
// the order tiles are used in (the same every step; storage/learned_order.h)
// so the shard can read the next ones before they are asked for (Next),
// and spill the one needed last.
//
// A spilled tile is two records in two RocksDB databases under the
// directory: its weights (weights/) and its optimizer state (state/), each
// with the version, so a pull of a spilled tile reads only the weights, a
// third of an Adam tile's bytes (ReadWeights), while an update reads both.
//
// The spill databases need no durability of their own: snapshots give that
// (storage/data_dir.h). Their WAL is off, they are emptied at Open, and
// large values go to RocksDB's blob files (BlobDB) rather than through
// compactions.
#ifndef STRATA_STORAGE_SPILL_STORE_H_
#define STRATA_STORAGE_SPILL_STORE_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "storage/chunk_record.h"
#include "storage/learned_order.h"
#include "storage/rocksdb_tier.h"

namespace strata {

struct SpillOptions {
  // Bytes of tiles held in RAM at most (more only for tiles in use at the
  // moment they are needed; server/shard_options.h states the overhead).
  uint64_t ram_budget = 0;
  // The spill databases' directory (emptied and created at Open).
  std::string dir;
  // Tiles read ahead of use, following the learned order; -1: the
  // eviction policy's default (4; none with kJustUsed).
  int prefetch_depth = -1;
  // Threads the shard reads ahead and writes back on.
  int io_threads = 2;
  // Read and flush the spill databases past the page cache (O_DIRECT), so
  // tiles come from and go to the disk and are not held in RAM a second
  // time (storage/rocksdb_tier.h); on a file system without it (tmpfs before
  // Linux 6.6) the store falls back to buffered I/O (direct_io() says which it
  // got).
  bool direct_io = true;
  // Write-behind: the resident tiles next to be spilled (Victims), this
  // many bytes of them, are written out on a thread of their own as soon
  // as they change, so that making room later only frees them and no
  // request waits on a write. 0 = a quarter of the budget. (Tiles written
  // out and then changed again before they are spilled are written twice:
  // the window bounds that. A read-ahead needs its room as soon as a use
  // ends and races the writer for it: where every resident tile has
  // changed, as when each use changes its tile, many spills still write
  // (end to end 35-41% of tile writes were made behind). With kFarthest
  // the next to go is mostly the tile just changed, so most spills
  // write.)
  // Off, a spill writes its tile itself (benches compare the two).
  bool write_behind = true;
  uint64_t write_behind_bytes = 0;
  // Which resident tile to spill first:
  // - kLeastRecent: the least recently used.
  // - kFarthest: the one whose next use in the learned order is farthest
  //   away (storage/learned_order.h). It reads fewer tiles when one thread
  //   updates them in a fixed order (bench/tier.sh: 8% fewer bytes, the
  //   same step time), but a server committing a BSP step on several
  //   threads interleaves that order differently every step, and end to
  //   end (124M, a quarter budget) its hit rate and its speed were lower
  //   than kJustUsed's (docs/BENCHMARKS.md).
  // - kJustUsed: the one used (or admitted) last. Belady's choice when each
  // tile is used once per cycle in
  //   about the same order, as under BSP, where only the push that closes a
  //   step uses a tile, whatever the interleaving of the commit's threads.
  //   Wrong where a tile is used again soon after a use (two workers'
  //   undeferred pushes of one chunk close together); under SSP/ASP with
  //   deferred commits, which come a step's compute apart, it still did
  //   better than kLeastRecent end to end. It writes nothing behind: the next
  //   tile to spill is the one just used, which a write-behind would
  //   write for nothing whenever the next use hits (write_behind is
  //   ignored). By default it reads nothing ahead either: under a BSP
  //   commit the learned order's read-aheads mispredict (the commit's
  //   threads interleave it anew each step; end to end 155-179 of about
  //   340 a server were spilled unused, and 9-19% fewer tokens/s).
  //   Where one thread uses the tiles in a fixed order (bench/tier.sh's
  //   ASP worker) a prefetch_depth given reads ahead; a tile read ahead
  //   goes last in the spill order until its use.
  enum class Eviction { kLeastRecent, kFarthest, kJustUsed };
  Eviction eviction = Eviction::kLeastRecent;
  // The spill databases' memtable size, both together (the weights'
  // database gets a third, the state's two thirds, 2 MiB at least each;
  // two of each may be full at once: RAM outside the budget); 0 = an
  // eighth of the budget, 8 to 64 MiB.
  size_t write_buffer_bytes = 0;
  // Tiles kept in RAM past the budget, this many bytes at most, because
  // pulls are waiting on them: under BSP the next step's pulls wait at the
  // gate while a commit applies the step, and a tile spilled the moment
  // its update ends (as kJustUsed does) would make each of them read its
  // weights back from disk. The last pull served lets it go.
  uint64_t pinned_bytes = 32 << 20;
};

// Running totals, for Stats and metrics.
struct SpillCounters {
  std::atomic<uint64_t> resident_bytes{0};
  std::atomic<uint64_t> spilled_bytes{0};  // tiles not resident now
  std::atomic<uint64_t> hits{0};           // uses that found the tile in RAM
  std::atomic<uint64_t> misses{0};         // uses that had to read it
  std::atomic<uint64_t> weight_reads{0};   // misses that read weights only
  std::atomic<uint64_t> prefetched{0};     // tiles read ahead of use
  // Read-aheads spilled again before their use, and read-aheads not made
  // because the budget held only other read-aheads.
  std::atomic<uint64_t> read_ahead_unused{0};
  std::atomic<uint64_t> read_aheads_skipped{0};
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> write_bytes{0};
  std::atomic<uint64_t> evictions{0};
  std::atomic<uint64_t> write_errors{0};
  std::atomic<uint64_t> written_behind{0};  // tiles written ahead of a spill
  std::atomic<uint64_t> spills_written{0};  // spills that wrote their tile
  // Time spent in reads and writes of the spill database, all threads.
  std::atomic<uint64_t> read_ns{0};
  std::atomic<uint64_t> write_ns{0};
};

// Thread-safe.
class SpillStore {
 public:
  // INVALID_ARGUMENT for a zero budget or an empty dir; the file system's
  // and RocksDB's errors for a directory that cannot be made or written
  // (checked by writing a probe record).
  static absl::StatusOr<std::unique_ptr<SpillStore>> Open(
      const SpillOptions& options);
  ~SpillStore();
  SpillStore(const SpillStore&) = delete;
  SpillStore& operator=(const SpillStore&) = delete;

  uint64_t budget() const { return options_.ram_budget; }
  SpillOptions::Eviction eviction() const { return options_.eviction; }
  uint64_t pinned_bytes() const { return options_.pinned_bytes; }
  uint64_t write_behind_bytes() const {
    return options_.write_behind_bytes > 0 ? options_.write_behind_bytes
                                           : options_.ram_budget / 4;
  }
  // Tiles to read ahead of use.
  int prefetch_depth() const {
    if (options_.prefetch_depth >= 0) return options_.prefetch_depth;
    return options_.eviction == SpillOptions::Eviction::kJustUsed ? 0 : 4;
  }
  // Whether changed tiles are written out ahead of their spill.
  bool write_behind() const {
    return options_.write_behind &&
           options_.eviction != SpillOptions::Eviction::kJustUsed;
  }

  // The tile `id` (`bytes` long) is now resident, most recently used;
  // `was_spilled` when it came back from the spill database. A tile read
  // ahead of its use (`read_ahead`) goes last in kJustUsed's spill order,
  // not first: it is needed soon, until its use (Touch) makes it the tile
  // used last.
  void Admit(uint64_t id, size_t bytes, bool was_spilled,
             bool read_ahead = false);
  // The tile `id` is no longer resident (it was spilled or dropped).
  void Release(uint64_t id);
  // The tile `id` was used: most recently used, and the successor of the
  // tile used before it in the learned order.
  void Touch(uint64_t id);
  // Whether holding `extra` more bytes would pass the budget plus `slack`.
  bool OverBudget(size_t extra, uint64_t slack = 0) const;
  // Up to `n` resident tiles in the order to spill them: those the learned
  // order does not expect, least recently used first, then the one whose
  // next use is farthest first (storage/learned_order.h), with kFarthest;
  // the most recently used (or admitted) first with kJustUsed; least
  // recently used first with kLeastRecent.
  std::vector<uint64_t> Victims(size_t n);
  // The first of Victims(), as many as it takes to cover `bytes` (all of
  // them if they do not).
  std::vector<uint64_t> VictimsCovering(uint64_t bytes);
  // Up to `n` tiles expected after `id`, following the learned order from
  // the tile used before id's latest use.
  std::vector<uint64_t> Next(uint64_t id, size_t n) const;
  // Tile bytes in RAM and on disk, read together (the counters alone may
  // be caught between a tile's move from one to the other).
  std::pair<uint64_t, uint64_t> Bytes() const;
  // A tile spilled, known not resident, of `bytes` (it was never admitted).
  void NoteSpilled(size_t bytes);

  // Stores a tile: its state, then its weights. Errors of the medium (a
  // full disk: RESOURCE_EXHAUSTED or INTERNAL, with the path) may leave
  // the state written and the weights not: the two then disagree on the
  // version until a later Write, which is why the shard reads a spilled
  // copy only after a Write of it succeeded (Chunk::disk_current).
  absl::Status Write(const ChunkRecord& tile);
  // Reads tile `id` back, weights and state. DATA_LOSS if it is missing
  // or corrupt, or its two records are of different versions.
  absl::StatusOr<ChunkRecord> Read(uint64_t id);
  // Reads only tile `id`'s weights and version (the record's slots are
  // empty). DATA_LOSS if they are missing or corrupt.
  absl::StatusOr<ChunkRecord> ReadWeights(uint64_t id);

  // A fresh, empty scratch ChunkTier on the spill disk (snapshot captures
  // of a shard that does not fit in RAM); its files go with it. It must not
  // outlive the store: a new store on the directory empties it.
  absl::StatusOr<std::unique_ptr<ChunkTier>> NewScratch();

  const SpillOptions& options() const { return options_; }
  bool direct_io() const { return direct_io_; }
  const SpillCounters& counters() const { return counters_; }
  SpillCounters& counters() { return counters_; }

 private:
  SpillStore(SpillOptions options, std::unique_ptr<RocksDbTier> weights,
             std::unique_ptr<RocksDbTier> state, bool direct_io);
  // A record read from `db` (the tile's weights or its state), timed and
  // counted; DATA_LOSS with the directory when it cannot be.
  absl::StatusOr<ChunkRecord> ReadPart(RocksDbTier& db, uint64_t id);
  // Resident tiles in the order Victims gives, while `want` (asked of each
  // before it is taken) says yes.
  std::vector<uint64_t> VictimsLocked(absl::FunctionRef<bool(uint64_t)> want)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SpillOptions options_;
  const bool direct_io_;
  const std::unique_ptr<RocksDbTier> weights_db_;
  const std::unique_ptr<RocksDbTier> state_db_;
  SpillCounters counters_;

  mutable absl::Mutex mu_;
  // Resident tiles, most recently used at the front, and their sizes.
  std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);
  struct Entry {
    std::list<uint64_t>::iterator pos;
    size_t bytes = 0;
  };
  absl::flat_hash_map<uint64_t, Entry> resident_ ABSL_GUARDED_BY(mu_);
  LearnedOrder order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_STORAGE_SPILL_STORE_H_
