// Converts RocksDB results to absl::Status: the one mapping for storage/'s
// tiers and the scheduler's state store.
#ifndef STRATA_STORAGE_ROCKSDB_STATUS_H_
#define STRATA_STORAGE_ROCKSDB_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "rocksdb/status.h"

namespace strata {

// The payload that marks an I/O error of the disk (not a busy or timed-out
// database) among UNAVAILABLE results.
inline constexpr char kDiskIoErrorPayload[] = "strata.dev/disk-io-error";

// Whether `s` came from a disk's I/O error (FromRocksDb).
inline bool IsDiskIoError(const absl::Status& s) {
  return s.GetPayload(kDiskIoErrorPayload).has_value();
}

// Maps `s` to a Status with `context` in front of RocksDB's message:
// NotFound -> NOT_FOUND, Corruption -> DATA_LOSS, no space ->
// RESOURCE_EXHAUSTED, Busy/TimedOut/TryAgain -> UNAVAILABLE,
// InvalidArgument/NotSupported -> INVALID_ARGUMENT, other I/O errors ->
// UNAVAILABLE (the disk or volume may come back: a caller may retry; the
// status carries kDiskIoErrorPayload, IsDiskIoError), the rest -> INTERNAL.
inline absl::Status FromRocksDb(const rocksdb::Status& s,
                                absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat(context, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) {
    return absl::UnavailableError(msg);
  }
  if (s.IsInvalidArgument() || s.IsNotSupported()) {
    return absl::InvalidArgumentError(msg);
  }
  if (s.IsIOError()) {
    absl::Status io = absl::UnavailableError(msg);
    io.SetPayload(kDiskIoErrorPayload, absl::Cord("1"));
    return io;
  }
  return absl::InternalError(msg);
}

}  // namespace strata

#endif  // STRATA_STORAGE_ROCKSDB_STATUS_H_
