// A ChunkTier in a RocksDB database on local disk: the store's cold tier
// and the format of its snapshots.
#ifndef STRATA_STORAGE_ROCKSDB_TIER_H_
#define STRATA_STORAGE_ROCKSDB_TIER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "storage/chunk_tier.h"

namespace rocksdb {
class DB;
}

namespace strata {

struct RocksDbTierOptions {
  // Log every write before applying it, so that a Put survives a crash of
  // the process once it returns. Off for bulk writes that end in Flush()
  // (snapshots): the data is then durable only after Flush.
  bool write_ahead_log = true;
  // Open without writing to the database (snapshots are opened so): Put,
  // Delete and Flush then fail with FAILED_PRECONDITION. No lock is taken.
  bool read_only = false;
  // Store values of 4 KiB and more in blob files (RocksDB's integrated
  // BlobDB): a large value is then written once instead of again at every
  // compaction. For databases whose every value is rewritten often (the
  // spill tier): blob files are not garbage-collected, they go when all
  // their values are overwritten.
  bool blob_files = false;
  // RocksDB's memtable size; 0 = its default (64 MiB). Values wait in up
  // to two memtables before they are flushed: RAM outside any budget.
  size_t write_buffer_bytes = 0;
  // Memtables that may be full at once, waiting for their flush; 0 = its
  // default (2). More let writes go on while earlier ones flush.
  int max_write_buffers = 0;
  // Flushes that may run at once; 0 = RocksDB's default (1). Raises the
  // process's pool of flush threads (RocksDB's HIGH priority pool, shared
  // by every database in the process) to at least this many.
  int flush_threads = 0;
  // Read and flush with O_DIRECT, past the page cache (a spill tier whose
  // bytes should not take the machine's RAM a second time, and must come
  // from and go to the disk). A flush writes one 4 MiB buffer at a time
  // (4 MiB of RAM per file being written) and waits for each: with RocksDB's
  // 1 MiB default that made the tier's writes about 3.5x slower than
  // buffered flushes synced at each file's end (bench/tier.sh). Since
  // RocksDB's CRC of each blob is Strata's fast one
  // (storage/rocksdb_crc32c.h), 4 MiB O_DIRECT flushes beat buffered ones
  // and the other buffer sizes tried (1, 2, 8, 16 MiB): a disk moves a
  // step's reads and buffered writes at once slower than O_DIRECT ones
  // (tier_bench's disk_mixed_s). File systems without O_DIRECT (tmpfs
  // before Linux 6.6) fail at Open with INVALID_ARGUMENT.
  bool direct_io = false;
  // Have RocksDB check its own checksums on Get (of the blob, and of the
  // table blocks it reads to find it). Each record carries a CRC-32C of
  // its own (storage/chunk_record.h), which every Get checks anyway, with
  // the record's id against the key; RocksDB's check of a blob is a second
  // pass over the value, in software in Debian's portable build: a fifth
  // of a tiered server's CPU by perf. The spill tier, whose
  // data is disposable (snapshots give durability), turns it off.
  bool verify_reads = true;
};

// Records encoded with EncodeChunkRecord, keyed by their id as 8 big-endian
// bytes (so RocksDB's order is id order). Thread-safe. The set of ids is
// kept in memory too, so size(), Delete of an absent id and the existence
// check of Put cost no disk reads.
class RocksDbTier : public ChunkTier {
 public:
  // Opens the database at `path`, creating it if `create` and it is absent.
  // NOT_FOUND if it is absent and !create; FAILED_PRECONDITION if another
  // RocksDbTier (in any process) has it open; DATA_LOSS if it or a record
  // in it is corrupt. Reads every key once to learn the ids.
  static absl::StatusOr<std::unique_ptr<RocksDbTier>> Open(
      const std::string& path, bool create,
      const RocksDbTierOptions& options = RocksDbTierOptions());
  ~RocksDbTier() override;
  RocksDbTier(const RocksDbTier&) = delete;
  RocksDbTier& operator=(const RocksDbTier&) = delete;

  absl::Status Put(const ChunkRecord& record) override;
  // As Put, for a record given by reference (no copy of its arrays).
  absl::Status PutRef(const ChunkRecordRef& record);
  absl::StatusOr<ChunkRecord> Get(uint64_t id) const override;
  absl::Status Delete(uint64_t id) override;
  absl::Status ForEach(
      const std::function<absl::Status(const ChunkRecord&)>& fn) const override;
  size_t size() const override;

  // Writes every record held in memory to table files and syncs them: once
  // it returns, all earlier Puts and Deletes survive a machine crash.
  absl::Status Flush();

  // Writes a consistent copy of the database into `dir` (which must not
  // exist yet; its parent must), hard-linking table files where the file
  // system allows. The copy opens with Open(dir, false).
  absl::Status Checkpoint(const std::string& dir);

  const std::string& path() const { return path_; }

 private:
  RocksDbTier(std::string path, std::unique_ptr<rocksdb::DB> db,
              RocksDbTierOptions options);
  absl::Status LoadIds();
  absl::Status CheckWritable() const;

  const std::string path_;
  const RocksDbTierOptions options_;
  const std::unique_ptr<rocksdb::DB> db_;
  // Serializes writes so `ids_` and the database agree.
  mutable absl::Mutex mu_;
  absl::flat_hash_set<uint64_t> ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_STORAGE_ROCKSDB_TIER_H_
