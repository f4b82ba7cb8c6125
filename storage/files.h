// Durable file operations for the storage layer: synced writes, atomic
// renames, bounded reads, with errors as Status naming the path.
#ifndef STRATA_STORAGE_FILES_H_
#define STRATA_STORAGE_FILES_H_

#include <cstddef>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

// INTERNAL: "<what> <path>: <message of ec>".
absl::Status FsError(absl::string_view what, const std::string& path,
                     const std::error_code& ec);

// FsError for the current errno.
absl::Status ErrnoError(absl::string_view what, const std::string& path);

// fsync()s a file or directory, making its contents or entries durable.
absl::Status SyncPath(const std::string& path);

// Writes `contents` to `path` (replacing it) and syncs it.
absl::Status WriteFileSynced(const std::string& path,
                             absl::string_view contents);

// Reads the file at `path`. NOT_FOUND if absent, DATA_LOSS if it is longer
// than `limit` bytes.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t limit);

// Replaces `to` with `from` atomically and syncs the parent of `to`.
absl::Status RenameSynced(const std::string& from, const std::string& to);

}  // namespace strata

#endif  // STRATA_STORAGE_FILES_H_
