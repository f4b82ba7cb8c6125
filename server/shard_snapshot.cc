#include <algorithm>
#include <utility>
#include <vector>

#include "server/shard.h"

// Capturing a shard's chunks for snapshots: the consistent cut BSP
// auto-snapshots assemble as each chunk closes the step, a capture of
// everything now, and the group configs saved beside them. Restoring is
// Shard::Restore (shard.cc), through the registration checks.
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
  if (sink) sink(step, std::move(done));
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

}  // namespace strata
