// A server's snapshots on disk: the consistent cuts BSP shards capture,
// written on a background thread so the push that closed a step does not
// wait for the disk; snapshots on request; and rolling the shard back to
// one (View.generation).
#ifndef STRATA_SERVER_SNAPSHOT_KEEPER_H_
#define STRATA_SERVER_SNAPSHOT_KEEPER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/thread_pool.h"
#include "server/shard.h"
#include "storage/data_dir.h"
#include "storage/ram_tier.h"

namespace strata {

// Thread-safe.
class SnapshotKeeper {
 public:
  // `dir` (may be null: no snapshots) and `shard` are not owned and must
  // outlive the keeper. `keep`: snapshots kept on disk (>= 1).
  SnapshotKeeper(DataDir* dir, Shard* shard, int keep);
  ~SnapshotKeeper();  // writes what was queued

  // Queues the cut of `step` the shard captured in rollback generation
  // `generation`. A newer cut replaces one not yet started (a slow disk
  // costs snapshots, never unbounded memory); a cut of an older generation
  // than the shard's is dropped.
  void Queue(uint64_t generation, int64_t step,
             std::unique_ptr<ChunkTier> capture);
  // Writes `capture`, taken in rollback generation `generation`, as the
  // snapshot of `step` now; returns its path. FAILED_PRECONDITION without a
  // data dir; ABORTED if the shard has rolled back since.
  absl::StatusOr<std::string> Write(int64_t step, const ChunkTier& capture,
                                    uint64_t generation);
  // Blocks until the cuts queued so far are written.
  void Flush();

  // The steps of the snapshots on disk (empty without a data dir).
  std::vector<int64_t> Held() const;
  // Called with Held() after each snapshot written or dropped.
  void set_on_change(std::function<void(std::vector<int64_t>)> cb);
  // Asked before each prune: snapshots of this step and after are kept
  // beyond `keep` (SchedulerClient::common_snapshot: the newest step every
  // server holds, where a rollback may go). Without it, -1: none.
  void set_protect(std::function<int64_t()> protect);

  // Rolls the shard back to `step` in `generation` (Shard::RollBack): to the
  // snapshot of `step`, or the initial weights for step 0. Queued cuts are
  // dropped, a write in progress is waited for, and snapshots after `step`
  // are removed (the job computes those steps again). A server holding no
  // chunks and no snapshot of `step` (a slot without chunks of the job)
  // only takes the generation. NOT_FOUND when this server holds chunks but
  // no snapshot of `step`; the shard's and the disk's errors.
  absl::Status RollBack(uint64_t generation, int64_t step);

 private:
  // On the writer thread: writes queued cuts until none is left.
  void Drain();
  void Changed();

  DataDir* const dir_;
  Shard* const shard_;
  const int keep_;

  absl::Mutex queue_mu_;
  struct Cut {
    uint64_t generation;
    int64_t step;
    std::unique_ptr<ChunkTier> capture;
  };
  std::optional<Cut> next_ ABSL_GUARDED_BY(queue_mu_);
  bool draining_ ABSL_GUARDED_BY(queue_mu_) = false;  // a drain is queued
  absl::Mutex write_mu_;  // one write (or rollback) at a time
  absl::Mutex cb_mu_;
  std::function<void(std::vector<int64_t>)> on_change_ ABSL_GUARDED_BY(cb_mu_);
  std::function<int64_t()> protect_ ABSL_GUARDED_BY(cb_mu_);
  // The step to keep snapshots from (protect_'s answer; INT64_MAX: none).
  int64_t ProtectFrom();
  ThreadPool writer_{1};  // last: destroyed (joined) first
};

}  // namespace strata

#endif  // STRATA_SERVER_SNAPSHOT_KEEPER_H_
