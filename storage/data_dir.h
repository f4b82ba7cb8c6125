// A parameter server's data directory and the snapshots in it.
//
// Layout of <path>:
//   STRATA_DATADIR, LOCK    the claim: marker and lock (dir_claim.h)
//   snapshots/step-<N>/     one complete snapshot per step N (20 digits):
//     db/                   a RocksDB of the chunk records (RocksDbTier)
//     META                  step, record count and the caller's metadata
//   tmp/                    snapshots being written; cleared by Open
// A snapshot is written under tmp/ and renamed into snapshots/ only once
// complete and synced, so a crash leaves either the whole snapshot or none.
#ifndef STRATA_STORAGE_DATA_DIR_H_
#define STRATA_STORAGE_DATA_DIR_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "storage/chunk_tier.h"
#include "storage/dir_claim.h"

namespace strata {

// The owner tag of parameter-server shard `shard`'s data directory
// ("shard-3"): what a server opens its directory with, and what a reader of
// its snapshots (strata generate) must give too.
std::string ShardOwnerTag(int shard);

// Reading a data directory's snapshots without claiming it, beside the
// server that holds it (what `strata export` does during a run).
//
// The steps of the complete snapshots in data directory `path`, in
// increasing order (none if it has no snapshots/ yet).
absl::StatusOr<std::vector<int64_t>> ListSnapshotsIn(const std::string& path);

// Puts every record of snapshot `step` of data directory `path` into `dest`
// and returns its metadata, as DataDir::LoadSnapshot does. The snapshot's
// files are hard-linked into `scratch` (which must not exist; on the same
// file system) and read from there, so a server pruning the snapshot
// meanwhile cannot take them away; `scratch` is removed after. NOT_FOUND
// if there is no such snapshot or it went before it was linked (list
// again); LoadSnapshot's errors.
absl::StatusOr<std::string> LoadSnapshotIn(const std::string& path,
                                           int64_t step, ChunkTier& dest,
                                           const std::string& scratch);

// An open data directory, held exclusively (a LOCK file, flock'd) from Open
// to destruction. Thread-safe; snapshot writes and loads are serialized.
class DataDir {
 public:
  // Opens or creates the data directory at `path` for `owner_tag` (e.g.
  // "shard-3"), claiming it (DirClaim::Acquire, whose errors it returns:
  // a directory that is not ours, another owner's, or open in another
  // DataDir is refused). Removes leftovers of interrupted snapshot writes.
  static absl::StatusOr<std::unique_ptr<DataDir>> Open(
      const std::string& path, const std::string& owner_tag);
  ~DataDir();
  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;

  // Writes a snapshot of every record `source` yields, tagged with `step`,
  // with `metadata` (opaque bytes; the server stores its optimizer groups'
  // configs there). Replaces an existing snapshot of the same step, then
  // deletes all but the newest `keep` snapshots and those of `protect` and
  // after (the newest step every server of the job holds: a rollback may
  // go there; at most 16 of those beyond `keep`). REQUIRES of the caller:
  // no updates to `source` while this runs (a step boundary). Errors:
  // INVALID_ARGUMENT for step < 0 or keep < 1; the errors of source.ForEach;
  // RocksDB and file system errors. On error no new snapshot is visible.
  absl::Status WriteSnapshot(
      int64_t step, const ChunkTier& source, absl::string_view metadata,
      int keep = 3, int64_t protect = std::numeric_limits<int64_t>::max());

  // The steps of the complete snapshots, in increasing order.
  absl::StatusOr<std::vector<int64_t>> ListSnapshots() const;

  // Removes every snapshot of a step after `step` (a job rolled back to
  // `step` computes those steps again; left behind, they would be taken
  // for newer than what follows).
  absl::Status DropSnapshotsAfter(int64_t step);

  // The step of the newest complete snapshot, or nullopt if there is none.
  absl::StatusOr<std::optional<int64_t>> LatestSnapshot() const;

  // Puts every record of snapshot `step` into `dest` and returns the
  // snapshot's metadata. NOT_FOUND if there is no such snapshot; DATA_LOSS
  // if its files or a record are corrupt or records are missing. On error
  // `dest` may hold part of the snapshot.
  absl::StatusOr<std::string> LoadSnapshot(int64_t step, ChunkTier& dest) const;

  // The directory of snapshot `step` (whether or not it exists).
  std::string SnapshotPath(int64_t step) const;

  const std::string& path() const { return path_; }
  // A random id made when the directory was first opened (file DIR_ID):
  // the scheduler knows a restarted server by it.
  const std::string& id() const { return id_; }
  const std::string& owner_tag() const { return claim_->owner_tag(); }

 private:
  DataDir(std::string path, std::unique_ptr<DirClaim> claim);
  // Writes snapshot `step` into `temp` (under tmp/), then renames it into
  // snapshots/.
  absl::Status WriteSnapshotLocked(int64_t step, const std::string& temp,
                                   const ChunkTier& source,
                                   absl::string_view metadata)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PruneLocked(int keep, int64_t protect)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves `dir` under tmp/ (atomically) and removes it there.
  absl::Status RemoveDirLocked(const std::string& dir)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewTempPathLocked(absl::string_view name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The id in `path`'s DIR_ID, made and stored if absent.
  static absl::StatusOr<std::string> LoadOrMakeId(const std::string& path);

  const std::string path_;
  const std::unique_ptr<DirClaim> claim_;
  std::string id_;  // set by Open
  mutable absl::Mutex mu_;
  uint64_t temp_counter_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_STORAGE_DATA_DIR_H_
