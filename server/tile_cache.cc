#include "server/tile_cache.h"

#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"
#include "storage/ram_tier.h"
#include "storage/rocksdb_status.h"

namespace strata {
namespace {

// Moves `tile`'s arrays into `rec` if they fit the chunk; else DATA_LOSS.
absl::Status Adopt(ChunkRecord tile, const v1::ChunkSpec& spec,
                   const OptimizerParams& params, ChunkRecord* rec) {
  if (tile.version != rec->version || tile.weights.size() != spec.numel() ||
      !StateFits(tile.slots, spec, params)) {
    return absl::DataLossError(
        absl::StrCat("spilled tile of chunk ", spec.tensor(), "#", spec.index(),
                     " is at version ", tile.version, " with ",
                     tile.weights.size(), " elements; the chunk is at version ",
                     rec->version, " with ", spec.numel()));
  }
  rec->weights = std::move(tile.weights);
  rec->slots = std::move(tile.slots);
  return absl::OkStatus();
}

}  // namespace

TileCache::TileCache(std::shared_ptr<SpillStore> spill, const ChunkTable& table)
    : spill_(std::move(spill)), table_(table) {
  if (spill_ != nullptr) {
    io_ = std::make_unique<ThreadPool>(spill_->options().io_threads);
    writer_ = std::make_unique<ThreadPool>(1);
  }
}

TileCache::~TileCache() = default;

absl::Status TileCache::AdmitNew(Chunk& c) {
  SpillStore* spill = spill_.get();
  if (spill == nullptr) return absl::OkStatus();
  if (!spill->OverBudget(c.tile_bytes)) {
    spill->Admit(c.spec.chunk_id(), c.tile_bytes, /*was_spilled=*/false);
    return absl::OkStatus();
  }
  // Over budget already: the new tile goes straight to disk. A disk that
  // refuses it refuses the chunk (the request's earlier chunks stay
  // registered; a retry registers the rest).
  if (absl::Status s = spill->Write(c.rec); !s.ok()) {
    DiskError(s);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot admit chunk ", c.spec.tensor(), "#", c.spec.index(),
        ": the RAM budget is full and the spill disk refused it: ",
        s.message()));
  }
  std::vector<float>().swap(c.rec.weights);
  std::vector<std::vector<float>>().swap(c.rec.slots);
  c.resident = false;
  c.disk_current = true;
  spill->NoteSpilled(c.tile_bytes);
  return absl::OkStatus();
}

void TileCache::Replaced(Chunk& c, bool was_resident) {
  c.Dirty();
  if (was_resident || spill_ == nullptr) return;
  c.resident = true;
  spill_->Admit(c.spec.chunk_id(), c.tile_bytes, /*was_spilled=*/true);
}

void TileCache::FillStats(v1::StatsResponse* out) const {
  const SpillStore* spill = spill_.get();
  if (spill == nullptr) return;
  const SpillCounters& t = spill->counters();
  v1::TierStats* tier = out->mutable_tier();
  tier->set_ram_budget(spill->budget());
  const auto [resident, spilled] = spill->Bytes();
  tier->set_resident_bytes(resident);
  tier->set_spilled_bytes(spilled);
  tier->set_hits(t.hits);
  tier->set_misses(t.misses);
  tier->set_prefetched(t.prefetched);
  tier->set_read_bytes(t.read_bytes);
  tier->set_write_bytes(t.write_bytes);
  tier->set_write_errors(t.write_errors);
  tier->set_written_behind(t.written_behind);
  tier->set_spills_written(t.spills_written);
  tier->set_read_ahead_unused(t.read_ahead_unused);
  tier->set_read_aheads_skipped(t.read_aheads_skipped);
  tier->set_weight_reads(t.weight_reads);
}

absl::Status TileCache::Resident(Chunk& c) {
  SpillStore* spill = spill_.get();
  if (spill == nullptr) return absl::OkStatus();
  const uint64_t id = c.spec.chunk_id();
  if (c.resident.load()) {
    c.read_ahead = false;
    spill->counters().hits++;
    spill->Touch(id);
    return absl::OkStatus();
  }
  if (absl::Status s = ReadTileInto(c, &c.rec); !s.ok()) return LostState(s);
  c.resident = true;
  c.disk_current = true;
  spill->Admit(id, c.tile_bytes, /*was_spilled=*/true);
  spill->counters().misses++;
  spill->Touch(id);
  return absl::OkStatus();
}

absl::StatusOr<const float*> TileCache::WeightsToPull(Chunk& c,
                                                      ChunkRecord* scratch) {
  SpillStore* spill = spill_.get();
  if (spill == nullptr) return c.rec.weights.data();
  if (c.resident.load()) {
    spill->counters().hits++;
    return c.rec.weights.data();
  }
  absl::StatusOr<ChunkRecord> weights = spill->ReadWeights(c.spec.chunk_id());
  if (!weights.ok()) return LostState(weights.status());
  *scratch = *std::move(weights);
  if (scratch->version != c.rec.version ||
      scratch->weights.size() != c.spec.numel()) {
    return LostState(absl::DataLossError(absl::StrCat(
        "spilled weights of chunk ", c.spec.tensor(), "#", c.spec.index(),
        " are at version ", scratch->version, " with ", scratch->weights.size(),
        " elements; the chunk is at version ", c.rec.version, " with ",
        c.spec.numel())));
  }
  spill->counters().misses++;
  spill->counters().weight_reads++;
  return scratch->weights.data();
}

void TileCache::set_lost_state_sink(LostStateSink sink) {
  absl::MutexLock lock(&lost_state_mu_);
  lost_state_sink_ = std::move(sink);
}

void TileCache::set_disk_error_sink(DiskErrorSink sink) {
  absl::MutexLock lock(&lost_state_mu_);
  disk_error_sink_ = std::move(sink);
}

void TileCache::DiskError(const absl::Status& s) const {
  if (!IsDiskIoError(s)) return;  // full, busy: it takes writes again
  DiskErrorSink sink;
  {
    absl::MutexLock lock(&lost_state_mu_);
    sink = disk_error_sink_;
  }
  if (sink) sink(s);
}

absl::Status TileCache::LostState(absl::Status why) const {
  LostStateSink sink;
  {
    absl::MutexLock lock(&lost_state_mu_);
    sink = lost_state_sink_;
  }
  if (sink) sink(why);
  return why;
}

absl::Status TileCache::Spill(Chunk& c) {
  SpillStore* spill = spill_.get();
  if (spill == nullptr || !c.resident.load()) return absl::OkStatus();
  if (!c.disk_current) {
    STRATA_RETURN_IF_ERROR(spill->Write(c.rec));
    spill->counters().spills_written++;
  }
  // Swapped out, not cleared: the memory goes back now.
  std::vector<float>().swap(c.rec.weights);
  std::vector<std::vector<float>>().swap(c.rec.slots);
  c.resident = false;
  c.disk_current = true;
  if (c.read_ahead.exchange(false)) spill->counters().read_ahead_unused++;
  spill->Release(c.spec.chunk_id());
  spill->counters().evictions++;
  return absl::OkStatus();
}

bool TileCache::MakeRoom(size_t extra, bool for_read_ahead) {
  SpillStore* spill = spill_.get();
  if (spill == nullptr) return true;
  // Tiles kept for the pulls waiting on them, and their bytes, let past the
  // budget (within pinned_bytes): the last pull served makes room (Unpin).
  std::vector<uint64_t> kept;
  uint64_t kept_bytes = 0;
  while (spill->OverBudget(extra, kept_bytes)) {
    const std::vector<uint64_t> victims = spill->Victims(8 + kept.size());
    bool progress = false;
    for (uint64_t id : victims) {
      if (!spill->OverBudget(extra, kept_bytes)) return true;
      absl::StatusOr<Chunk*> v = table_.Find(id);
      if (!v.ok() || (for_read_ahead && (*v)->read_ahead.load())) continue;
      if (absl::c_linear_search(kept, id)) continue;
      auto keep = [&] {
        if ((*v)->pull_waiters.load() == 0 ||
            kept_bytes + (*v)->tile_bytes > spill->pinned_bytes()) {
          return false;
        }
        kept.push_back(id);
        kept_bytes += (*v)->tile_bytes;
        return true;
      };
      if (keep()) {
        progress = true;
        continue;
      }
      if (!(*v)->mu.TryLock()) continue;  // in use: the next one
      if (keep()) {                       // a pull came to wait on it meanwhile
        (*v)->mu.Unlock();
        progress = true;
        continue;
      }
      const absl::Status s = Spill(**v);
      (*v)->mu.Unlock();
      if (!s.ok()) {
        // A full or failing disk: the tile stays in RAM, whole, and the
        // shard runs over budget until the disk takes writes again.
        spdlog::error("strata server: cannot spill chunk {}: {}", id,
                      s.ToString());
        DiskError(s);
        return false;
      }
      progress = true;
    }
    if (!progress) return false;  // every candidate in use: over budget
  }
  return true;
}

void TileCache::Unpin(Chunk& c) {
  if (c.pull_waiters.fetch_sub(1) != 1) return;
  SpillStore* spill = spill_.get();
  if (spill == nullptr || !c.resident.load() || !spill->OverBudget(0) ||
      unpinning_.exchange(true)) {
    return;
  }
  // Not on the pull's time: the spill may write the tile.
  Schedule(*io_, [this] {
    unpinning_ = false;
    MakeRoom(0);
  });
}

void TileCache::Schedule(ThreadPool& pool, std::function<void()> task) {
  {
    absl::MutexLock lock(&tasks_mu_);
    ++tasks_;
  }
  pool.Schedule([this, task = std::move(task)] {
    task();
    absl::MutexLock lock(&tasks_mu_);
    --tasks_;
  });
}

void TileCache::BeforeUse(const Chunk& c) {
  if (spill_ != nullptr && !c.resident.load()) MakeRoom(c.tile_bytes);
}

void TileCache::AfterUse(const Chunk& c) {
  SpillStore* spill = spill_.get();
  if (spill == nullptr) return;
  for (uint64_t id : spill->Next(c.spec.chunk_id(), spill->prefetch_depth())) {
    absl::StatusOr<Chunk*> found = table_.Find(id);
    if (!found.ok()) continue;
    Chunk* next = *found;
    if (next->resident.load() || next->prefetching.exchange(true)) continue;
    Schedule(*io_, [this, next] { ReadAhead(next); });
  }
  if (spill->OverBudget(0)) MakeRoom(0);
  if (spill->write_behind() && !writing_behind_.exchange(true)) {
    Schedule(*writer_, [this] {
      WriteBehind();
      writing_behind_ = false;
    });
  }
}

void TileCache::ReadAhead(Chunk* next) {
  SpillStore* spill = spill_.get();
  // No room without spilling other read-aheads: the use reads it.
  const bool room = MakeRoom(next->tile_bytes, /*for_read_ahead=*/true);
  if (!room) spill->counters().read_aheads_skipped++;
  bool admitted = false;
  {
    absl::MutexLock lock(&next->mu);
    if (room && !next->resident.load()) {
      const absl::Status s = ReadTileInto(*next, &next->rec);
      if (s.ok()) {
        next->resident = true;
        next->disk_current = true;
        next->read_ahead = true;
        spill->Admit(next->spec.chunk_id(), next->tile_bytes,
                     /*was_spilled=*/true, /*read_ahead=*/true);
        spill->counters().prefetched++;
        admitted = true;
      } else {
        // The use itself reads it again and answers the error.
        spdlog::error("strata server: read-ahead of chunk {}: {}",
                      next->spec.chunk_id(), s.ToString());
      }
    }
  }
  next->prefetching = false;
  // The room it took may have been a tile kept for pulls (MakeRoom),
  // whose last pull then found the budget held and made none.
  if (admitted && spill->OverBudget(0)) MakeRoom(0, /*for_read_ahead=*/true);
}

void TileCache::WriteBehind() {
  SpillStore* spill = spill_.get();
  for (uint64_t id : spill->VictimsCovering(spill->write_behind_bytes())) {
    absl::StatusOr<Chunk*> found = table_.Find(id);
    // In use: it is not the coldest for long, and its user may change it.
    if (!found.ok() || !(*found)->mu.TryLock()) continue;
    Chunk& c = **found;
    absl::Status s;
    if (c.resident.load() && !c.disk_current) {
      s = spill->Write(c.rec);
      if (s.ok()) {
        c.disk_current = true;
        spill->counters().written_behind++;
      }
    }
    c.mu.Unlock();
    if (!s.ok()) {
      // The tile stays resident and changed; spilling it will try again
      // and report the error where it matters.
      spdlog::warn("strata server: write-behind of chunk {}: {}", id,
                   s.ToString());
      DiskError(s);
      return;
    }
  }
}

void TileCache::WaitForIo() {
  absl::MutexLock lock(&tasks_mu_);
  tasks_mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &tasks_));
}

absl::StatusOr<ChunkRecord> TileCache::TileCopy(const Chunk& c) const {
  if (c.resident.load()) return c.rec;
  ChunkRecord copy;
  copy.id = c.rec.id;
  copy.version = c.rec.version;
  copy.spec = c.rec.spec;
  if (absl::Status s = ReadTileInto(c, &copy); !s.ok()) return LostState(s);
  return copy;
}

absl::Status TileCache::ReadTileInto(const Chunk& c, ChunkRecord* rec) const {
  absl::StatusOr<ChunkRecord> tile = spill_->Read(c.spec.chunk_id());
  if (!tile.ok()) return tile.status();
  return Adopt(*std::move(tile), c.spec, c.group->params, rec);
}

absl::StatusOr<std::unique_ptr<ChunkTier>> TileCache::NewScratch() const {
  if (spill_ != nullptr) return spill_->NewScratch();
  return std::unique_ptr<ChunkTier>(std::make_unique<RamTier>());
}

}  // namespace strata
