// The servers' data directories of one job side by side (`strata local`'s
// layout: <dir>/server-0, <dir>/server-1, ...), and the newest snapshot step
// they all hold: the consistent cut a whole job can resume from or be read
// back at.
#ifndef STRATA_STORAGE_SERVER_DIRS_H_
#define STRATA_STORAGE_SERVER_DIRS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/data_dir.h"

namespace strata {

// The paths <dir>/server-0, server-1, ... up to the first missing one.
// NOT_FOUND if there is no server-0.
absl::StatusOr<std::vector<std::string>> ServerDirPaths(const std::string& dir);

// Each slot's directories: ServerDirPaths' <dir>/server-<s>, then those of
// the other replicas of a `strata local --replicas` run, <dir>/replica-<r>/
// server-<s> for r = 1, 2, ... up to the first missing replica-<r>.
// ServerDirPaths' errors.
absl::StatusOr<std::vector<std::vector<std::string>>> ServerDirsBySlot(
    const std::string& dir);

// Opens (claims) the directories ServerDirPaths names. Its errors and
// DataDir::Open's (a directory in use by a running server is refused).
absl::StatusOr<std::vector<std::unique_ptr<DataDir>>> OpenServerDirs(
    const std::string& dir);

// The newest step <= max_step in every list of `steps` (each server's
// snapshot steps, sorted; `paths` names the servers in errors). NOT_FOUND
// if a list is empty; FAILED_PRECONDITION if no such step is in all.
absl::StatusOr<int64_t> NewestCommonStep(
    const std::vector<std::string>& paths,
    const std::vector<std::vector<int64_t>>& steps,
    int64_t max_step = INT64_MAX);

// The newest step <= max_step of which every one of `servers` holds a
// snapshot: NewestCommonStep of their ListSnapshots, and its errors.
absl::StatusOr<int64_t> NewestCommonSnapshot(
    const std::vector<std::unique_ptr<DataDir>>& servers,
    int64_t max_step = INT64_MAX);

}  // namespace strata

#endif  // STRATA_STORAGE_SERVER_DIRS_H_
