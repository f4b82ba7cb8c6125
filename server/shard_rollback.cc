// Capturing every chunk at once, restoring a snapshot at start (through
// the registration checks), and rolling a running shard back to a
// snapshot or to its initial weights. BSP auto-snapshots' cuts are
// server/snapshot_capture.h's.
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/init.h"
#include "server/shard.h"
#include "server/shard_parts.h"

namespace strata {

absl::StatusOr<std::unique_ptr<ChunkTier>> Shard::CaptureAll() const {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ChunkTier> capture,
                          p_->tiles.NewScratch());
  for (Chunk* c : p_->table.All()) {
    absl::StatusOr<ChunkRecord> copy;
    {
      absl::MutexLock lock(&c->mu);
      copy = p_->tiles.TileCopy(*c);
    }
    // Outside the chunk's lock: the capture's own lock is never taken
    // under a shard lock (a capture may be rolled back to, whose records
    // are read while shard locks are taken).
    STRATA_RETURN_IF_ERROR(copy.status());
    STRATA_RETURN_IF_ERROR(capture->Put(*copy));
  }
  return capture;
}

absl::StatusOr<std::unique_ptr<ChunkTier>> Shard::NewScratchTier() const {
  return p_->tiles.NewScratch();
}

std::string Shard::GroupsMetadata() const { return p_->table.GroupsMetadata(); }

absl::Status Shard::Restore(const std::string& metadata,
                            const ChunkTier& records) {
  STRATA_RETURN_IF_ERROR(p_->table.RegisterGroups(metadata));
  // One record at a time, fetched outside the tier's ForEach (as RollBack).
  std::vector<uint64_t> ids;
  STRATA_RETURN_IF_ERROR(records.ForEach([&](const ChunkRecord& rec) {
    ids.push_back(rec.id);
    return absl::OkStatus();
  }));
  for (uint64_t id : ids) {
    STRATA_ASSIGN_OR_RETURN(ChunkRecord rec, records.Get(id));
    STRATA_RETURN_IF_ERROR(p_->table.RestoreChunk(rec));
  }
  return absl::OkStatus();
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
  std::vector<uint64_t> ids;
  InitFiles init_files;  // each opened once for the whole rollback
  STRATA_RETURN_IF_ERROR(
      CheckRollBack(step, metadata, records, &ids, &init_files));
  // A chunk created from now on is in the new generation; one created
  // before is in `all`.
  const std::vector<Chunk*> all = p_->table.StartGeneration(generation, step);
  if (records != nullptr) {
    absl::flat_hash_set<uint64_t> not_moved;
    for (Chunk* c : all) not_moved.insert(c->spec.chunk_id());
    for (uint64_t id : ids) {
      // Read before: the check read the same, unchanged records.
      STRATA_ASSIGN_OR_RETURN(ChunkRecord rec, records->Get(id));
      STRATA_ASSIGN_OR_RETURN(Chunk * c, p_->table.Find(id));
      ResetChunk(*c, generation, step, &rec, false, &init_files);
      not_moved.erase(id);
      p_->tiles.MakeRoom(0);  // a budget holds through a rollback too
    }
    // Registered since the check: the snapshot does not hold their state.
    for (Chunk* c : all) {
      if (not_moved.contains(c->spec.chunk_id())) {
        ResetChunk(*c, generation, step, nullptr, false, &init_files);
      }
    }
  } else {
    for (Chunk* c : all) {
      ResetChunk(*c, generation, step, nullptr, true, &init_files);
      p_->tiles.MakeRoom(0);
    }
  }
  p_->applied.Clear();
  p_->snapshots.Reset(step);
  p_->membership.SetGeneration(generation);
  return absl::OkStatus();
}

absl::Status Shard::CheckRollBack(int64_t step, const std::string* metadata,
                                  const ChunkTier* records,
                                  std::vector<uint64_t>* ids,
                                  InitFiles* init_files) {
  // Two passes over the snapshot's records, one at a time, so neither
  // holds it all in RAM (a shard with a budget may hold many times its
  // RAM): this one creates the chunks this shard lacks (a restarted
  // server that restored an older snapshot, or none) and checks every
  // record, RollBack's second moves every chunk to it. Records are fetched
  // with Get, never inside the tier's ForEach: no shard lock is taken
  // while the tier holds its own.
  if (records != nullptr) {
    STRATA_RETURN_IF_ERROR(p_->table.RegisterGroups(*metadata));
    STRATA_RETURN_IF_ERROR(records->ForEach([&](const ChunkRecord& rec) {
      ids->push_back(rec.id);
      return absl::OkStatus();
    }));
    for (uint64_t id : *ids) {
      STRATA_ASSIGN_OR_RETURN(ChunkRecord rec, records->Get(id));
      STRATA_RETURN_IF_ERROR(p_->table.RestoreChunk(rec));
      STRATA_ASSIGN_OR_RETURN(Chunk * c, p_->table.Find(id));
      if (rec.weights.size() != c->spec.numel() ||
          !StateFits(rec.slots, c->spec, c->group->params)) {
        return absl::DataLossError(absl::StrCat(
            "the snapshot of step ", step, "'s chunk ", c->spec.tensor(), "#",
            c->spec.index(), " does not match it"));
      }
    }
  }
  // Everything checked before any chunk moves, so a bad snapshot (or an
  // initial weights file gone since) changes no chunk's state.
  const absl::flat_hash_set<uint64_t> in_snapshot(ids->begin(), ids->end());
  for (Chunk* c : p_->table.All()) {
    if (records == nullptr) {
      STRATA_RETURN_IF_ERROR(CheckChunkInit(c->spec, init_files));
    } else if (!in_snapshot.contains(c->spec.chunk_id())) {
      return absl::DataLossError(absl::StrCat("the snapshot of step ", step,
                                              " lacks chunk ", c->spec.tensor(),
                                              "#", c->spec.index()));
    }
  }
  return absl::OkStatus();
}

void Shard::ResetChunk(Chunk& c, uint64_t generation, int64_t step,
                       ChunkRecord* rec, bool init, InitFiles* init_files) {
  // Into the new generation, under its lock: with `rec` from the snapshot,
  // the initial weights (`init`), or its state as it is (neither: a chunk
  // registered since the check, whose state the snapshot does not hold).
  if (rec != nullptr || init) p_->tiles.BeforeUse(c);
  absl::MutexLock lock(&c.mu);
  if (rec != nullptr || init) {
    const bool was_resident = c.resident.load();
    if (rec != nullptr) {
      c.rec = std::move(*rec);
    } else {
      const size_t n = c.spec.numel();
      c.rec.weights.resize(n);
      // Checked before the first chunk moved; a file that changed since
      // loses this chunk's state, which stops the server (as a lost tile
      // does) rather than train from zeros.
      if (absl::Status s =
              FillChunkInit(c.spec, c.rec.weights.data(), init_files);
          !s.ok()) {
        p_->tiles.LostState(s).IgnoreError();
      }
      c.rec.slots = ZeroState(c.spec, c.group->params);
      c.rec.version = 0;
    }
    p_->tiles.Replaced(c, was_resident);
  }
  for (auto& [id, contrib] : c.open) p_->pool.Give(std::move(contrib.grad));
  c.open.clear();
  if (!c.sums.grad.empty()) p_->pool.Give(std::move(c.sums.grad));
  c.sums = TensorSums();
  c.clocks.clear();
  c.lift.clear();
  for (Chunk::PullArrival& p : c.step_pulls) p = {};
  c.generation = generation;
  c.generation_step = step;
  c.changed.SignalAll();  // pulls of the old generation are ABORTED
}

}  // namespace strata
