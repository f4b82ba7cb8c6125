#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/init.h"
#include "server/shard.h"

// Capturing a shard's chunks for snapshots: the consistent cut BSP
// auto-snapshots assemble as each chunk closes the step, a capture of
// everything now, and the group configs saved beside them; and rolling a
// running shard back to a snapshot; restoring one at start, through the
// registration checks.
namespace strata {

void Shard::CaptureForSnapshot(const Chunk& c) {
  const int64_t step = static_cast<int64_t>(c.rec.version);
  ChunkRecord copy = c.rec;  // under the chunk's lock, not snap_mu_
  std::unique_ptr<RamTier> done;
  {
    absl::MutexLock lock(&snap_mu_);
    if (step <= last_captured_step_) return;  // a newer cut is already complete
    auto& capture = pending_snapshots_[step];
    if (!capture) capture = std::make_unique<RamTier>();
    (void)capture->Put(std::move(copy));
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

std::unique_ptr<RamTier> Shard::CaptureAll() const {
  std::vector<Chunk*> all;
  {
    absl::MutexLock lock(&table_mu_);
    for (auto& [id, c] : chunks_) all.push_back(c.get());
  }
  auto capture = std::make_unique<RamTier>();
  for (Chunk* c : all) {
    absl::MutexLock lock(&c->mu);
    (void)capture->Put(c->rec);
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
  // Copied out first: no shard lock is taken under the tier's.
  absl::flat_hash_map<uint64_t, ChunkRecord> restored;
  if (records != nullptr) {
    STRATA_RETURN_IF_ERROR(records->ForEach([&](const ChunkRecord& rec) {
      restored[rec.id] = rec;
      return absl::OkStatus();
    }));
    // A chunk the snapshot holds that this shard lacks (a restarted server
    // that restored an older snapshot, or none) is created first.
    STRATA_RETURN_IF_ERROR(RegisterGroups(*metadata));
    for (const auto& [id, rec] : restored) {
      STRATA_RETURN_IF_ERROR(RestoreChunk(rec));
    }
  }
  std::vector<Chunk*> all;
  {
    absl::MutexLock lock(&table_mu_);
    for (auto& [id, c] : chunks_) all.push_back(c.get());
  }
  // Check everything first, so a bad snapshot changes no chunk's state.
  for (Chunk* c : all) {
    if (records == nullptr) continue;
    auto it = restored.find(c->spec.chunk_id());
    absl::MutexLock lock(&c->mu);
    if (it == restored.end() ||
        it->second.weights.size() != c->rec.weights.size() ||
        it->second.slots.size() != c->rec.slots.size()) {
      return absl::DataLossError(absl::StrCat(
          "the snapshot of step ", step, " lacks chunk ", c->spec.tensor(), "#",
          c->spec.index(), " or does not match it"));
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
  for (Chunk* c : all) {
    absl::MutexLock lock(&c->mu);
    auto it = restored.find(c->spec.chunk_id());
    if (records != nullptr && it != restored.end()) {
      c->rec = std::move(it->second);
    } else if (records != nullptr) {
      // Registered since the check above: its state is not in the
      // snapshot; it keeps what it was created with.
    } else {
      const size_t n = c->spec.numel();
      FillInit(c->spec.init(), c->spec.chunk_id(), c->rec.weights.data(), n);
      for (auto& slot : c->rec.slots) std::fill(slot.begin(), slot.end(), 0.0f);
      c->rec.version = 0;
    }
    for (auto& [id, contrib] : c->open) GiveBuffer(std::move(contrib.grad));
    c->open.clear();
    c->clocks.clear();
    c->generation = generation;
    c->generation_step = step;
    c->changed.SignalAll();  // pulls of the old generation are ABORTED
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
  return records.ForEach(
      [this](const ChunkRecord& rec) { return RestoreChunk(rec); });
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
