// Faults injected below Strata's storage, for tests: EIO or ENOSPC on a
// read, a write or a file's fsync, and torn writes, under every file the
// servers and the scheduler keep: RocksDB's files (the spill tier,
// snapshots' record databases, the scheduler's state) through a
// rocksdb::FileSystem wrapper, and the small files of storage/files.h
// (snapshots' META, DIR_ID, claims). Not wrapped: the fsyncs of
// directories RocksDB makes, and its random read-write files.
// leveldb's Env and RocksDB's fault-injection file system do the same job
// for their own tests; this one is Strata's (RocksDB's is not in its public
// headers).
//
// Off unless a test calls FaultInjection::Install(): then RocksDB databases
// opened after that use the layer (those already open do not), and each
// file operation asks the rules in force. With no rule, everything passes
// through. A production process never installs it.
#ifndef STRATA_STORAGE_FAULT_FS_H_
#define STRATA_STORAGE_FAULT_FS_H_

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace rocksdb {
class Env;
}

namespace strata {

enum class FaultOp { kRead, kWrite, kSync };

struct FaultRule {
  // Files whose path starts with this (a directory's path ends with '/' to
  // match only what is under it).
  std::string path_prefix;
  // ... and whose path ends with this ("" matches any).
  std::string path_suffix;
  FaultOp op = FaultOp::kWrite;
  int error = EIO;  // the errno reported: EIO or ENOSPC
  // Matching operations let through before the first failure.
  int64_t skip = 0;
  // Matching operations failed after those; -1: every one from then on.
  int64_t times = -1;
  // kWrite only: the first half of the bytes reach the file before the
  // error (a write cut off by a crash or a full disk).
  bool torn = false;
};

// What an operation meets: no fault (error 0), or an errno and whether the
// write is torn.
struct Fault {
  int error = 0;
  bool torn = false;
};

// The rules in force, process-wide. Thread-safe.
class FaultInjection {
 public:
  // Installs the layer (once; later calls return the same) and returns it.
  static FaultInjection& Install();
  // The installed layer, or nullptr.
  static FaultInjection* Get();

  void Add(FaultRule rule);
  // Removes every rule: operations pass through again.
  void Clear();
  // Faults injected since the layer was installed.
  int64_t injected() const;

  // The fault an operation `op` on `path` meets now (counting it against
  // the matching rule's skip and times).
  Fault Check(FaultOp op, absl::string_view path);

 private:
  FaultInjection() = default;
  mutable absl::Mutex mu_;
  std::vector<FaultRule> rules_ ABSL_GUARDED_BY(mu_);
  int64_t injected_ ABSL_GUARDED_BY(mu_) = 0;
};

// The fault an operation meets: none when the layer is not installed.
Fault FaultAt(FaultOp op, absl::string_view path);

// The Env a RocksDB database is opened with: the layer's when installed,
// else nullptr (keep RocksDB's default). Its thread pools are the default
// Env's.
rocksdb::Env* FaultEnvOrNull();

}  // namespace strata

#endif  // STRATA_STORAGE_FAULT_FS_H_
