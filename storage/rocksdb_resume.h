// Writes that outlive a full disk. RocksDB stops a database on a
// background I/O error (a flush that met ENOSPC or EIO) and refuses every
// later write until it recovers: from ENOSPC on its own thread once there
// is room (about a second after, in storage/fault_fs_test.cc), or when
// DB::Resume is called; from EIO not at all (a fatal error: the database
// must be reopened). WriteResuming tries a write refused with an I/O error
// once more after a successful Resume, so a database stopped by a
// recoverable error takes the write that finds the disk well again.
#ifndef STRATA_STORAGE_ROCKSDB_RESUME_H_
#define STRATA_STORAGE_ROCKSDB_RESUME_H_

#include "rocksdb/db.h"
#include "rocksdb/status.h"

namespace strata {

// `write` is called once, or twice when the first call failed with an I/O
// error and db.Resume() succeeded (the database had stopped, or had not:
// Resume is then a no-op). Returns the last call's status.
template <typename WriteFn>
rocksdb::Status WriteResuming(rocksdb::DB& db, WriteFn write) {
  rocksdb::Status s = write();
  if (s.ok() || !s.IsIOError()) return s;
  if (!db.Resume().ok()) return s;
  return write();
}

}  // namespace strata

#endif  // STRATA_STORAGE_ROCKSDB_RESUME_H_
