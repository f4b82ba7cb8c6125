#include "server/snapshot_keeper.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace strata {

SnapshotKeeper::SnapshotKeeper(DataDir* dir, Shard* shard, int keep)
    : dir_(dir), shard_(shard), keep_(keep) {}

SnapshotKeeper::~SnapshotKeeper() { Flush(); }

void SnapshotKeeper::Queue(uint64_t generation, int64_t step,
                           std::unique_ptr<ChunkTier> capture) {
  {
    absl::MutexLock lock(&queue_mu_);
    next_.emplace(Cut{generation, step, std::move(capture)});
    if (draining_) return;
    draining_ = true;
  }
  writer_.Schedule([this] { Drain(); });
}

void SnapshotKeeper::Drain() {
  for (;;) {
    Cut cut;
    {
      absl::MutexLock lock(&queue_mu_);
      if (!next_.has_value()) {
        draining_ = false;
        return;
      }
      cut = std::move(*next_);
      next_.reset();
    }
    absl::MutexLock write_lock(&write_mu_);
    // Taken before a rollback that has finished since: its step is redone.
    if (cut.generation != shard_->generation()) continue;
    if (dir_ == nullptr) continue;
    absl::Status s = dir_->WriteSnapshot(
        cut.step, *cut.capture, shard_->GroupsMetadata(), keep_, ProtectFrom());
    if (!s.ok()) {
      spdlog::error("strata server: snapshot of step {} failed: {}", cut.step,
                    s.ToString());
      continue;
    }
    Changed();
  }
}

absl::StatusOr<std::string> SnapshotKeeper::Write(int64_t step,
                                                  const ChunkTier& capture,
                                                  uint64_t generation) {
  if (dir_ == nullptr)
    return absl::FailedPreconditionError("this server has no --data_dir");
  absl::MutexLock lock(&write_mu_);
  if (generation != shard_->generation()) {
    return absl::AbortedError(
        "the job rolled back while the snapshot was taken; take it again");
  }
  STRATA_RETURN_IF_ERROR(dir_->WriteSnapshot(
      step, capture, shard_->GroupsMetadata(), keep_, ProtectFrom()));
  Changed();
  return dir_->SnapshotPath(step);
}

void SnapshotKeeper::Flush() {
  absl::MutexLock lock(&queue_mu_);
  queue_mu_.Await(absl::Condition(
      +[](SnapshotKeeper* k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k->queue_mu_) {
        return !k->draining_;
      },
      this));
}

std::vector<int64_t> SnapshotKeeper::Held() const {
  if (dir_ == nullptr) return {};
  absl::StatusOr<std::vector<int64_t>> held = dir_->ListSnapshots();
  if (!held.ok()) {
    spdlog::error("strata server: cannot list snapshots: {}",
                  held.status().ToString());
    return {};
  }
  return *std::move(held);
}

void SnapshotKeeper::set_on_change(
    std::function<void(std::vector<int64_t>)> cb) {
  absl::MutexLock lock(&cb_mu_);
  on_change_ = std::move(cb);
}

void SnapshotKeeper::set_protect(std::function<int64_t()> protect) {
  absl::MutexLock lock(&cb_mu_);
  protect_ = std::move(protect);
}

int64_t SnapshotKeeper::ProtectFrom() {
  int64_t from = -1;
  {
    // Called under the lock, as on_change_: set_protect(nullptr) returns
    // once no call is under way.
    absl::MutexLock lock(&cb_mu_);
    if (protect_) from = protect_();
  }
  // Step 0 is the initial weights, made from the chunk specs: never kept
  // for it.
  return from > 0 ? from : std::numeric_limits<int64_t>::max();
}

void SnapshotKeeper::Changed() {
  std::vector<int64_t> held = Held();
  absl::MutexLock lock(&cb_mu_);
  if (on_change_) on_change_(std::move(held));
}

absl::Status SnapshotKeeper::RollBack(uint64_t generation, int64_t step) {
  {
    absl::MutexLock lock(&queue_mu_);
    next_.reset();
  }
  absl::MutexLock write_lock(&write_mu_);
  const std::vector<int64_t> all = Held();
  const bool held = std::find(all.begin(), all.end(), step) != all.end();
  if (step == 0 || (!held && shard_->num_chunks() == 0)) {
    // Step 0; or a server without chunks (a slot that holds none of the
    // job's, which the rollback did not consider): only the generation.
    STRATA_RETURN_IF_ERROR(shard_->RollBack(generation, 0, nullptr, nullptr));
  } else {
    if (dir_ == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "rolling back to step ", step, ": this server has no --data_dir"));
    }
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ChunkTier> records,
                            shard_->NewScratchTier());
    absl::StatusOr<std::string> meta = dir_->LoadSnapshot(step, *records);
    if (!meta.ok()) {
      return absl::Status(meta.status().code(),
                          absl::StrCat("rolling back to step ", step, ": ",
                                       meta.status().message()));
    }
    STRATA_RETURN_IF_ERROR(
        shard_->RollBack(generation, step, &*meta, records.get()));
  }
  if (dir_ != nullptr) STRATA_RETURN_IF_ERROR(dir_->DropSnapshotsAfter(step));
  Changed();
  spdlog::warn("strata server: rolled back to step {} (generation {})", step,
               generation);
  return absl::OkStatus();
}

}  // namespace strata
