#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/init.h"
#include "server/shard.h"
#include "spdlog/spdlog.h"

// Capturing a shard's chunks for snapshots: the consistent cut BSP
// auto-snapshots assemble as each chunk closes the step, a capture of
// everything now, and the group configs saved beside them; and rolling a
// running shard back to a snapshot; restoring one at start, through the
// registration checks.
namespace strata {

void Shard::CaptureForSnapshot(const Chunk& c) {
  const int64_t step = static_cast<int64_t>(c.rec.version);
  // Under the chunk's lock, not snap_mu_.
  absl::StatusOr<ChunkRecord> copy = TileCopy(c);
  std::unique_ptr<ChunkTier> done;
  {
    absl::MutexLock lock(&snap_mu_);
    if (step <= last_captured_step_) return;  // a newer cut is already complete
    auto& capture = pending_snapshots_[step];
    if (!capture) {
      absl::StatusOr<std::unique_ptr<ChunkTier>> fresh = NewScratchTier();
      if (!fresh.ok())
        copy = fresh.status();
      else
        capture = *std::move(fresh);
    }
    absl::Status put = copy.status();
    if (put.ok()) {
      auto* ram = dynamic_cast<RamTier*>(capture.get());
      put = ram != nullptr ? ram->Put(*std::move(copy)) : capture->Put(*copy);
    }
    if (!put.ok()) {
      // This step's cut cannot complete; a later one will.
      spdlog::error("strata server: snapshot capture of step {}: {}", step,
                    put.ToString());
      pending_snapshots_.erase(step);
      return;
    }
    if (capture->size() < num_chunks_.load()) return;
    done = std::move(capture);
    last_captured_step_ = step;
    // Older cuts can no longer complete consistently: drop them.
    pending_snapshots_.erase(pending_snapshots_.begin(),
                             pending_snapshots_.upper_bound(step));
  }
  SnapshotSink sink;
  {
    absl::MutexLock lock(&snap_mu_);
    sink = snapshot_sink_;
  }
  if (sink) sink(c.generation, step, std::move(done));
}

void Shard::set_snapshot_sink(SnapshotSink sink) {
  absl::MutexLock lock(&snap_mu_);
  snapshot_sink_ = std::move(sink);
}

absl::StatusOr<std::unique_ptr<ChunkTier>> Shard::CaptureAll() const {
  std::vector<Chunk*> all;
  {
    absl::MutexLock lock(&table_mu_);
    for (auto& [id, c] : chunks_) all.push_back(c.get());
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ChunkTier> capture, NewScratchTier());
  for (Chunk* c : all) {
    absl::StatusOr<ChunkRecord> copy;
    {
      absl::MutexLock lock(&c->mu);
      copy = TileCopy(*c);
    }
    // Outside the chunk's lock: the capture's own lock is never taken
    // under a shard lock (a capture may be rolled back to, whose records
    // are read while shard locks are taken).
    STRATA_RETURN_IF_ERROR(copy.status());
    STRATA_RETURN_IF_ERROR(capture->Put(*copy));
  }
  return capture;
}

std::string Shard::GroupsMetadata() const {
  absl::MutexLock lock(&table_mu_);
  v1::RegisterChunksRequest meta;
  for (const auto& [name, g] : groups_) *meta.add_groups() = g->spec;
  std::sort(meta.mutable_groups()->begin(), meta.mutable_groups()->end(),
            [](const auto& a, const auto& b) { return a.name() < b.name(); });
  return meta.SerializeAsString();
}

absl::Status Shard::RollBack(uint64_t generation, int64_t step,
                             const std::string* metadata,
                             const ChunkTier* records) {
  absl::MutexLock update_lock(&update_mu_);  // no view sweep meanwhile
  if (generation <= this->generation()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rollback to generation ", generation,
                     " is not newer than this shard's ", this->generation()));
  }
  // Two passes over the snapshot's records, one at a time, so neither
  // holds it all in RAM (a shard with a budget may hold many times its
  // RAM): the first creates the chunks this shard lacks (a restarted
  // server that restored an older snapshot, or none) and checks every
  // record, the second moves every chunk to it. Records are fetched with
  // Get, never inside the tier's ForEach: no shard lock is taken while the
  // tier holds its own.
  std::vector<uint64_t> ids;
  if (records != nullptr) {
    STRATA_RETURN_IF_ERROR(RegisterGroups(*metadata));
    STRATA_RETURN_IF_ERROR(records->ForEach([&](const ChunkRecord& rec) {
      ids.push_back(rec.id);
      return absl::OkStatus();
    }));
    for (uint64_t id : ids) {
      STRATA_ASSIGN_OR_RETURN(ChunkRecord rec, records->Get(id));
      STRATA_RETURN_IF_ERROR(RestoreChunk(rec));
      STRATA_ASSIGN_OR_RETURN(Chunk * c, FindChunk(id));
      if (rec.weights.size() != c->spec.numel() ||
          static_cast<int>(rec.slots.size()) !=
              NumStateSlots(c->group->params)) {
        return absl::DataLossError(absl::StrCat(
            "the snapshot of step ", step, "'s chunk ", c->spec.tensor(), "#",
            c->spec.index(), " does not match it"));
      }
    }
  }
  const absl::flat_hash_set<uint64_t> in_snapshot(ids.begin(), ids.end());
  std::vector<Chunk*> all;
  {
    absl::MutexLock lock(&table_mu_);
    for (auto& [id, c] : chunks_) all.push_back(c.get());
  }
  // Check everything first, so a bad snapshot (or an initial weights file
  // gone since) changes no chunk's state.
  InitFiles init_files;  // each opened once for the whole rollback
  if (records == nullptr) {
    for (Chunk* c : all)
      STRATA_RETURN_IF_ERROR(CheckChunkInit(c->spec, &init_files));
  }
  if (records != nullptr) {
    for (Chunk* c : all) {
      if (!in_snapshot.contains(c->spec.chunk_id())) {
        return absl::DataLossError(
            absl::StrCat("the snapshot of step ", step, " lacks chunk ",
                         c->spec.tensor(), "#", c->spec.index()));
      }
    }
  }
  {
    // Under the table's lock: a chunk created from now on (CreateChunk runs
    // under it) is in the new generation; one created before is in `all`.
    absl::MutexLock lock(&table_mu_);
    rolled_step_ = step;
    rolled_generation_ = generation;
    all.clear();
    for (auto& [id, c] : chunks_) all.push_back(c.get());
  }
  // Moves one chunk into the new generation, under its lock: with `rec`
  // from the snapshot, the initial weights (`init`), or its state as it is
  // (neither: a chunk registered since the check, whose state the snapshot
  // does not hold).
  auto reset = [&](Chunk* c, ChunkRecord* rec, bool init) {
    if (rec != nullptr || init) BeforeUse(*c);
    absl::MutexLock lock(&c->mu);
    if (rec != nullptr || init) {
      const bool was_resident = c->resident.load();
      if (rec != nullptr) {
        c->rec = std::move(*rec);
      } else {
        const size_t n = c->spec.numel();
        c->rec.weights.resize(n);
        // Checked before the first chunk moved; a file that changed since
        // loses this chunk's state, which stops the server (as a lost tile
        // does) rather than train from zeros.
        if (absl::Status s =
                FillChunkInit(c->spec, c->rec.weights.data(), &init_files);
            !s.ok()) {
          LostState(s).IgnoreError();
        }
        c->rec.slots.resize(NumStateSlots(c->group->params));
        for (auto& slot : c->rec.slots) slot.assign(n, 0.0f);
        c->rec.version = 0;
      }
      if (!was_resident) {
        c->resident = true;
        options_.spill->Admit(c->spec.chunk_id(), c->tile_bytes,
                              /*was_spilled=*/true);
      }
      Dirty(*c);
    }
    for (auto& [id, contrib] : c->open) GiveBuffer(std::move(contrib.grad));
    c->open.clear();
    c->clocks.clear();
    for (Chunk::PullArrival& p : c->step_pulls) p = {};
    c->generation = generation;
    c->generation_step = step;
    c->changed.SignalAll();  // pulls of the old generation are ABORTED
  };
  if (records != nullptr) {
    absl::flat_hash_set<uint64_t> not_moved;
    for (Chunk* c : all) not_moved.insert(c->spec.chunk_id());
    for (uint64_t id : ids) {
      // Read before: the check above read the same, unchanged records.
      STRATA_ASSIGN_OR_RETURN(ChunkRecord rec, records->Get(id));
      STRATA_ASSIGN_OR_RETURN(Chunk * c, FindChunk(id));
      reset(c, &rec, false);
      not_moved.erase(id);
      MakeRoom(0);  // a budget holds through a rollback too
    }
    for (Chunk* c : all) {
      if (not_moved.contains(c->spec.chunk_id())) reset(c, nullptr, false);
    }
  } else {
    for (Chunk* c : all) {
      reset(c, nullptr, true);
      MakeRoom(0);
    }
  }
  applied_.Clear();
  {
    absl::MutexLock lock(&snap_mu_);
    pending_snapshots_.clear();
    last_captured_step_ = step;
  }
  absl::MutexLock lock(&view_mu_);
  generation_ = generation;
  view_changed_.SignalAll();
  return absl::OkStatus();
}

uint64_t Shard::generation() const { return generation_.load(); }

absl::Status Shard::Restore(const std::string& metadata,
                            const ChunkTier& records) {
  STRATA_RETURN_IF_ERROR(RegisterGroups(metadata));
  // One record at a time, fetched outside the tier's ForEach (as RollBack).
  std::vector<uint64_t> ids;
  STRATA_RETURN_IF_ERROR(records.ForEach([&](const ChunkRecord& rec) {
    ids.push_back(rec.id);
    return absl::OkStatus();
  }));
  for (uint64_t id : ids) {
    STRATA_ASSIGN_OR_RETURN(ChunkRecord rec, records.Get(id));
    STRATA_RETURN_IF_ERROR(RestoreChunk(rec));
  }
  return absl::OkStatus();
}

absl::Status Shard::RegisterGroups(const std::string& metadata) {
  v1::RegisterChunksRequest meta;
  if (!meta.ParseFromString(metadata))
    return absl::DataLossError("snapshot metadata is corrupt");
  return Register(meta).status();
}

absl::Status Shard::RestoreChunk(const ChunkRecord& rec) {
  v1::ChunkSpec spec;
  if (!spec.ParseFromString(rec.spec)) {
    return absl::DataLossError(
        absl::StrCat("snapshot chunk ", rec.id, " has a corrupt spec"));
  }
  STRATA_RETURN_IF_ERROR(ValidateChunkSpec(spec, options_.max_chunk_bytes));
  absl::MutexLock lock(&table_mu_);
  // Held already (a rollback of a running shard): RollBack sets its state.
  if (chunks_.contains(rec.id)) return absl::OkStatus();
  auto g = groups_.find(spec.group());
  if (g == groups_.end()) {
    return absl::DataLossError(absl::StrCat(
        "snapshot chunk ", rec.id, " names unknown group ", spec.group()));
  }
  tensor_shapes_[spec.tensor()] = {spec.tensor_shape().begin(),
                                   spec.tensor_shape().end()};
  return CreateChunk(spec, g->second.get(), &rec);
}

}  // namespace strata
