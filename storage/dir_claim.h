// Claiming a directory for one owner: how every Strata data directory (a
// server's, the scheduler's) is made ours and held. In the directory:
//   STRATA_DATADIR   marker: Strata, format version, owner tag (CRC'd)
//   LOCK             flock'd while a DirClaim holds the directory
// A directory is ours if it is absent or empty (the marker is then written)
// or holds our marker; anything else is refused, so a mistyped path never
// has someone's files mixed with ours or deleted.
#ifndef STRATA_STORAGE_DIR_CLAIM_H_
#define STRATA_STORAGE_DIR_CLAIM_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace strata {

class DirClaim {
 public:
  // Claims `path` for `owner_tag` (e.g. "shard-3", "scheduler") and takes
  // its lock. `legacy_marker`, when not empty, names a file that marked the
  // directory as ours in an older layout: a directory holding it and no
  // STRATA_DATADIR is adopted (the marker is written, the old file removed).
  // Errors: INVALID_ARGUMENT for an empty owner tag or one with control
  // characters; FAILED_PRECONDITION if `path` is not a directory, is
  // non-empty without our marker ("not a Strata data directory"), belongs
  // to another owner, has a newer format, or is held by another DirClaim
  // (in this process or another); DATA_LOSS if the marker is unreadable or
  // corrupt; INTERNAL for file system errors.
  static absl::StatusOr<std::unique_ptr<DirClaim>> Acquire(
      const std::string& path, const std::string& owner_tag,
      const std::string& legacy_marker = "");
  ~DirClaim();  // releases the lock
  DirClaim(const DirClaim&) = delete;
  DirClaim& operator=(const DirClaim&) = delete;

  const std::string& path() const { return path_; }
  const std::string& owner_tag() const { return owner_tag_; }

 private:
  DirClaim(std::string path, std::string owner_tag, int lock_fd);

  const std::string path_;
  const std::string owner_tag_;
  const int lock_fd_;
};

}  // namespace strata

#endif  // STRATA_STORAGE_DIR_CLAIM_H_
