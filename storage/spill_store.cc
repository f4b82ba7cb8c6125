#include "storage/spill_store.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "storage/files.h"

namespace strata {
namespace {

// The spill database's own settings: no WAL (snapshots give durability),
// blob files for the multi-MiB tiles, small memtables (they hold tiles
// outside the budget until flushed).
RocksDbTierOptions SpillDbOptions(bool direct_io, size_t write_buffer) {
  RocksDbTierOptions o;
  o.direct_io = direct_io;
  o.write_buffer_bytes = write_buffer;
  o.write_ahead_log = false;
  o.blob_files = true;
  o.verify_reads = false;  // the records' own CRC-32C is checked
  // Every tile spilled is a flush's worth of a small memtable. When a
  // flush was as much CPU as disk (RocksDB's blob checksum in software,
  // before storage/rocksdb_crc32c.h), two at once took the tier's writes
  // from 5.2-5.8 to 3.7-3.8 s per step, summed over threads, and the step
  // from 2.79-3.01 to 2.51-2.55 s (bench/tier.sh, 2026-11-26); two O_DIRECT
  // flushes also keep two writes in flight.
  o.flush_threads = 2;
  return o;
}

// The memtable size of both databases together: as set, or an eighth of
// the budget between 8 and 64 MiB. A tile written while both memtables are
// full waits for a flush (measured once: 8 MiB memtables with 12 MiB tiles
// made a step 3.5x slower than 64 MiB ones); the memtables are RAM outside
// the budget.
size_t WriteBuffer(const SpillOptions& o) {
  if (o.write_buffer_bytes > 0) return o.write_buffer_bytes;
  return std::clamp<size_t>(o.ram_budget / 8, 8 << 20, 64 << 20);
}

// One database's share of it: a third for the weights, two thirds for
// the state, as an Adam tile's bytes split (so with a budget of 8 tiles
// and more each memtable holds at least its part of a tile); 2 MiB at
// least each.
enum class Part { kWeights, kState };
size_t PartWriteBuffer(const SpillOptions& o, Part part) {
  const size_t all = WriteBuffer(o);
  return std::max<size_t>(part == Part::kWeights ? all / 3 : all - all / 3,
                          2 << 20);
}

// A RocksDbTier whose directory goes with it.
class ScratchTier : public ChunkTier {
 public:
  explicit ScratchTier(std::unique_ptr<RocksDbTier> db) : db_(std::move(db)) {}
  ~ScratchTier() override {
    const std::string path = db_->path();
    db_.reset();
    std::error_code ec;
    std::filesystem::remove_all(path, ec);  // best effort: Open clears it
  }
  absl::Status Put(const ChunkRecord& record) override {
    return db_->Put(record);
  }
  absl::StatusOr<ChunkRecord> Get(uint64_t id) const override {
    return db_->Get(id);
  }
  absl::Status Delete(uint64_t id) override { return db_->Delete(id); }
  absl::Status ForEach(const std::function<absl::Status(const ChunkRecord&)>&
                           fn) const override {
    return db_->ForEach(fn);
  }
  size_t size() const override { return db_->size(); }

 private:
  std::unique_ptr<RocksDbTier> db_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SpillStore>> SpillStore::Open(
    const SpillOptions& options) {
  if (options.ram_budget == 0)
    return absl::InvalidArgumentError("a RAM budget of 0 bytes");
  if (options.dir.empty())
    return absl::InvalidArgumentError("the spill tier needs a directory");
  if (options.prefetch_depth < -1 || options.io_threads < 1) {
    return absl::InvalidArgumentError(
        "the spill tier needs prefetch_depth >= -1 and io_threads >= 1");
  }

  // What a previous run spilled is stale: the shard restores from its
  // snapshots.
  std::error_code ec;
  std::filesystem::remove_all(options.dir, ec);
  if (ec) return FsError("cannot clear the spill directory", options.dir, ec);
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return FsError("cannot create the spill directory", options.dir, ec);
  // Each database opened and tried once (a record written, flushed to a
  // file, read back and deleted), so a directory that cannot be written,
  // or a file system without O_DIRECT, fails here and not mid-training.
  auto open = [&](const std::string& name, Part part,
                  bool direct) -> absl::StatusOr<std::unique_ptr<RocksDbTier>> {
    const std::string path = absl::StrCat(options.dir, "/", name);
    std::filesystem::remove_all(path, ec);
    auto db = RocksDbTier::Open(
        path, /*create=*/true,
        SpillDbOptions(direct, PartWriteBuffer(options, part)));
    if (!db.ok()) return db.status();
    ChunkRecord probe;
    probe.id = UINT64_MAX;
    probe.weights.assign(4096, 1.0f);
    STRATA_RETURN_IF_ERROR((*db)->Put(probe));
    STRATA_RETURN_IF_ERROR((*db)->Flush());
    STRATA_RETURN_IF_ERROR((*db)->Get(probe.id).status());
    STRATA_RETURN_IF_ERROR((*db)->Delete(probe.id));
    return db;
  };
  bool direct = options.direct_io;
  auto weights = open("weights", Part::kWeights, direct);
  if (!weights.ok() && direct) {
    // No O_DIRECT here (tmpfs, some overlay file systems): buffered I/O,
    // for both (they are on the one file system).
    direct = false;
    weights = open("weights", Part::kWeights, direct);
  }
  if (!weights.ok()) return weights.status();
  auto state = open("state", Part::kState, direct);
  if (!state.ok()) return state.status();
  return std::unique_ptr<SpillStore>(
      new SpillStore(options, *std::move(weights), *std::move(state), direct));
}

SpillStore::SpillStore(SpillOptions options,
                       std::unique_ptr<RocksDbTier> weights,
                       std::unique_ptr<RocksDbTier> state, bool direct_io)
    : options_(std::move(options)),
      direct_io_(direct_io),
      weights_db_(std::move(weights)),
      state_db_(std::move(state)) {}

SpillStore::~SpillStore() = default;

void SpillStore::Admit(uint64_t id, size_t bytes, bool was_spilled,
                       bool read_ahead) {
  absl::MutexLock lock(&mu_);
  if (was_spilled) counters_.spilled_bytes -= bytes;
  auto [it, inserted] = resident_.try_emplace(id);
  if (!inserted) {
    counters_.resident_bytes -= it->second.bytes;
    lru_.erase(it->second.pos);
  }
  if (read_ahead && options_.eviction == SpillOptions::Eviction::kJustUsed) {
    lru_.push_back(id);
    it->second.pos = std::prev(lru_.end());
  } else {
    lru_.push_front(id);
    it->second.pos = lru_.begin();
  }
  it->second.bytes = bytes;
  counters_.resident_bytes += bytes;
}

void SpillStore::Release(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = resident_.find(id);
  if (it == resident_.end()) return;
  counters_.resident_bytes -= it->second.bytes;
  counters_.spilled_bytes += it->second.bytes;
  lru_.erase(it->second.pos);
  resident_.erase(it);
}

void SpillStore::Touch(uint64_t id) {
  absl::MutexLock lock(&mu_);
  order_.Use(id);
  auto it = resident_.find(id);
  if (it == resident_.end()) return;
  lru_.splice(lru_.begin(), lru_, it->second.pos);
}

void SpillStore::NoteSpilled(size_t bytes) {
  absl::MutexLock lock(&mu_);
  counters_.spilled_bytes += bytes;
}

std::pair<uint64_t, uint64_t> SpillStore::Bytes() const {
  absl::MutexLock lock(&mu_);
  return {counters_.resident_bytes.load(), counters_.spilled_bytes.load()};
}

bool SpillStore::OverBudget(size_t extra, uint64_t slack) const {
  return counters_.resident_bytes.load() + extra > options_.ram_budget + slack;
}

std::vector<uint64_t> SpillStore::VictimsLocked(
    absl::FunctionRef<bool(uint64_t)> want) {
  std::vector<uint64_t> out;
  if (options_.eviction == SpillOptions::Eviction::kJustUsed) {
    // Most recently used (or admitted) first; tiles read ahead and not
    // yet used are at the back (Admit), the one read ahead last after the
    // others: among themselves they go in the order they came, which is
    // not Belady's (the one needed soonest came first), but a read-ahead
    // makes room without spilling another (TileCache::MakeRoom), so the order
    // matters only when nothing else can go.
    for (auto it = lru_.begin(); it != lru_.end() && want(*it); ++it) {
      out.push_back(*it);
    }
    return out;
  }
  if (options_.eviction == SpillOptions::Eviction::kLeastRecent) {
    // Least recently used first: walk the list only as far as wanted.
    for (auto it = lru_.rbegin(); it != lru_.rend() && want(*it); ++it) {
      out.push_back(*it);
    }
    return out;
  }
  for (uint64_t id : order_.FarthestFirst(
           std::vector<uint64_t>(lru_.rbegin(), lru_.rend()))) {
    if (!want(id)) break;
    out.push_back(id);
  }
  return out;
}

std::vector<uint64_t> SpillStore::Victims(size_t n) {
  absl::MutexLock lock(&mu_);
  size_t taken = 0;
  return VictimsLocked([&](uint64_t) { return taken++ < n; });
}

std::vector<uint64_t> SpillStore::VictimsCovering(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  uint64_t covered = 0;
  return VictimsLocked([&](uint64_t id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (covered >= bytes) return false;
    covered += resident_.find(id)->second.bytes;  // victims are resident_'s
    return true;
  });
}

std::vector<uint64_t> SpillStore::Next(uint64_t id, size_t n) const {
  absl::MutexLock lock(&mu_);
  return order_.Next(id, n);
}

absl::Status SpillStore::Write(const ChunkRecord& tile) {
  // Refused here while the disk still has room for what RocksDB holds in
  // its memtables: a flush that meets a full disk is an error RocksDB
  // cannot always come back from (Debian's build even asserts on one
  // path, sync_without_flush_called_, and the server dies). So the tier
  // never lets RocksDB fill the disk: below two memtables, this tile and
  // 8 MiB of room, a write is refused, and the tile stays in RAM.
  struct statvfs fs {};
  if (statvfs(options_.dir.c_str(), &fs) == 0) {
    const uint64_t free_bytes =
        static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_frsize);
    const uint64_t needed = 2 * (PartWriteBuffer(options_, Part::kWeights) +
                                 PartWriteBuffer(options_, Part::kState)) +
                            ChunkRecordBytes(tile) + (8 << 20);
    if (free_bytes < needed) {
      counters_.write_errors++;
      return absl::ResourceExhaustedError(absl::StrCat(
          "the spill disk at ", options_.dir, " has ", free_bytes >> 20,
          " MiB free; a tile write needs ", needed >> 20,
          " MiB (the tile, two memtables' flushes and 8 MiB of room)"));
    }
  }
  // The state first: a pull reads the weights alone, and takes their
  // version for the tile's (the shard reads a spilled copy only once a
  // Write of it has succeeded whole).
  ChunkRecordRef state;
  state.id = tile.id;
  state.version = tile.version;
  state.slots = tile.slots;
  ChunkRecordRef weights;
  weights.id = tile.id;
  weights.version = tile.version;
  weights.spec = tile.spec;
  weights.weights = tile.weights;
  const absl::Time start = absl::Now();
  absl::Status s = state_db_->PutRef(state);
  if (s.ok()) s = weights_db_->PutRef(weights);
  counters_.write_ns += absl::ToInt64Nanoseconds(absl::Now() - start);
  if (!s.ok()) {
    counters_.write_errors++;
    return s;
  }
  counters_.write_bytes += ChunkRecordBytes(tile) - sizeof(ChunkRecord);
  return absl::OkStatus();
}

absl::StatusOr<ChunkRecord> SpillStore::ReadPart(RocksDbTier& db, uint64_t id) {
  const absl::Time start = absl::Now();
  absl::StatusOr<ChunkRecord> part = db.Get(id);
  counters_.read_ns += absl::ToInt64Nanoseconds(absl::Now() - start);
  if (!part.ok()) {
    return absl::DataLossError(
        absl::StrCat("spilled tile of chunk ", id, " cannot be read back from ",
                     db.path(), ": ", part.status().ToString()));
  }
  counters_.read_bytes += ChunkRecordBytes(*part) - sizeof(ChunkRecord);
  return part;
}

absl::StatusOr<ChunkRecord> SpillStore::Read(uint64_t id) {
  STRATA_ASSIGN_OR_RETURN(ChunkRecord tile, ReadPart(*weights_db_, id));
  STRATA_ASSIGN_OR_RETURN(ChunkRecord state, ReadPart(*state_db_, id));
  if (state.version != tile.version) {
    return absl::DataLossError(
        absl::StrCat("spilled tile of chunk ", id, " in ", options_.dir,
                     ": its weights are at version ", tile.version,
                     ", its state at ", state.version));
  }
  tile.slots = std::move(state.slots);
  return tile;
}

absl::StatusOr<ChunkRecord> SpillStore::ReadWeights(uint64_t id) {
  return ReadPart(*weights_db_, id);
}

absl::StatusOr<std::unique_ptr<ChunkTier>> SpillStore::NewScratch() {
  // Unique in the process: a scratch tier may outlive its store, and a
  // new store on the same directory must not open the same database.
  static std::atomic<uint64_t> serial{0};
  const std::string path = absl::StrCat(options_.dir, "/scratch-", serial++);
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  auto db = RocksDbTier::Open(
      path, /*create=*/true, SpillDbOptions(direct_io_, WriteBuffer(options_)));
  if (!db.ok()) return db.status();
  return std::unique_ptr<ChunkTier>(new ScratchTier(*std::move(db)));
}

}  // namespace strata
