#include "server/snapshot_capture.h"

#include <utility>

#include "spdlog/spdlog.h"
#include "storage/ram_tier.h"

namespace strata {

void SnapshotCapture::Add(const Chunk& c) {
  const int64_t step = static_cast<int64_t>(c.rec.version);
  // Under the chunk's lock, not mu_.
  std::unique_ptr<ChunkTier> done = Put(step, tiles_.TileCopy(c));
  if (done == nullptr) return;
  SnapshotSink sink;
  {
    absl::MutexLock lock(&mu_);
    sink = sink_;
  }
  if (sink) sink(c.generation, step, std::move(done));
}

std::unique_ptr<ChunkTier> SnapshotCapture::Put(
    int64_t step, absl::StatusOr<ChunkRecord> copy) {
  absl::MutexLock lock(&mu_);
  if (step <= last_captured_step_) return nullptr;  // a newer cut is complete
  std::unique_ptr<ChunkTier>& capture = pending_[step];
  if (!capture) {
    absl::StatusOr<std::unique_ptr<ChunkTier>> fresh = tiles_.NewScratch();
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
    pending_.erase(step);
    return nullptr;
  }
  if (capture->size() < table_.size()) return nullptr;
  std::unique_ptr<ChunkTier> done = std::move(capture);
  last_captured_step_ = step;
  // Older cuts can no longer complete consistently: drop them.
  pending_.erase(pending_.begin(), pending_.upper_bound(step));
  return done;
}

void SnapshotCapture::Reset(int64_t step) {
  absl::MutexLock lock(&mu_);
  pending_.clear();
  last_captured_step_ = step;
}

void SnapshotCapture::set_sink(SnapshotSink sink) {
  absl::MutexLock lock(&mu_);
  sink_ = std::move(sink);
}

}  // namespace strata
