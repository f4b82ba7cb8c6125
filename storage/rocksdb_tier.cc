#include "storage/rocksdb_tier.h"

#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "storage/fault_fs.h"
#include "storage/rocksdb_resume.h"
#include "storage/rocksdb_status.h"

namespace strata {
namespace {

constexpr size_t kKeyBytes = 8;

std::string Key(uint64_t id) {
  std::string key(kKeyBytes, '\0');
  for (size_t i = 0; i < kKeyBytes; ++i) {
    key[i] = static_cast<char>(id >> (8 * (kKeyBytes - 1 - i)));
  }
  return key;
}

absl::StatusOr<uint64_t> IdOfKey(const rocksdb::Slice& key) {
  if (key.size() != kKeyBytes) {
    return absl::DataLossError(
        absl::StrCat("chunk key of ", key.size(), " bytes, want 8"));
  }
  uint64_t id = 0;
  for (size_t i = 0; i < kKeyBytes; ++i) {
    id = (id << 8) | static_cast<uint8_t>(key[i]);
  }
  return id;
}

// Decodes the value stored under `id`, checking it is that chunk's.
absl::StatusOr<ChunkRecord> DecodeStored(uint64_t id, absl::string_view value,
                                         const std::string& path) {
  absl::StatusOr<ChunkRecord> record = DecodeChunkRecord(value);
  if (!record.ok()) {
    return absl::Status(
        record.status().code(),
        absl::StrCat(path, ": chunk ", id, ": ", record.status().message()));
  }
  if (record->id != id) {
    return absl::DataLossError(
        absl::StrCat(path, ": key of chunk ", id, " holds chunk ", record->id));
  }
  return record;
}

rocksdb::Options DbOptions(bool create, const RocksDbTierOptions& tier) {
  rocksdb::Options options;
  if (rocksdb::Env* env = FaultEnvOrNull()) options.env = env;  // tests only
  if (tier.blob_files) {
    options.enable_blob_files = true;
    options.min_blob_size = 4096;
    // No blob garbage collection: the tier rewrites every tile each step,
    // so a blob file's values all die together and the file goes once
    // compaction drops their keys. Relocating live values instead doubled
    // the disk writes and added half again to the reads (bench/tier.sh)
    // for no smaller footprint: the spill directory stays near the spilled
    // state's size either way.
    options.enable_blob_garbage_collection = false;
  }
  if (tier.direct_io) {
    options.use_direct_reads = true;
    // Flushes write 4 MiB at a time: see RocksDbTierOptions::direct_io.
    options.use_direct_io_for_flush_and_compaction = true;
    options.writable_file_max_buffer_size = 4 << 20;
  }
  if (tier.flush_threads > 0) {
    options.env->IncBackgroundThreadsIfNeeded(tier.flush_threads,
                                              rocksdb::Env::Priority::HIGH);
    // Deprecated in RocksDB 7 but honoured: jobs become these flushes and
    // one compaction (max_background_jobs alone would run a quarter of
    // its jobs as flushes, the rest as compactions).
    options.max_background_flushes = tier.flush_threads;
  }
  if (tier.max_write_buffers > 0) {
    options.max_write_buffer_number = tier.max_write_buffers;
  }
  if (tier.write_buffer_bytes > 0) {
    options.write_buffer_size = tier.write_buffer_bytes;
  }
  options.create_if_missing = create;
  options.paranoid_checks = true;
  // fp32 weights and optimizer state do not compress; don't spend CPU on it.
  options.compression = rocksdb::kNoCompression;
  return options;
}

rocksdb::ReadOptions ScanOptions() {
  rocksdb::ReadOptions options;
  options.verify_checksums = true;
  options.fill_cache = false;  // a scan reads each block once
  return options;
}

}  // namespace

RocksDbTier::RocksDbTier(std::string path, std::unique_ptr<rocksdb::DB> db,
                         RocksDbTierOptions options)
    : path_(std::move(path)), options_(options), db_(std::move(db)) {}

RocksDbTier::~RocksDbTier() = default;

absl::StatusOr<std::unique_ptr<RocksDbTier>> RocksDbTier::Open(
    const std::string& path, bool create, const RocksDbTierOptions& options) {
  std::error_code ec;
  if (!create && !std::filesystem::exists(path + "/CURRENT", ec)) {
    return absl::NotFoundError(absl::StrCat("no RocksDB database at ", path));
  }
  if (create && !std::filesystem::create_directories(path, ec) && ec) {
    return absl::InternalError(
        absl::StrCat("creating ", path, ": ", ec.message()));
  }
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s =
      options.read_only
          ? rocksdb::DB::OpenForReadOnly(DbOptions(false, options), path, &raw)
          : rocksdb::DB::Open(DbOptions(create, options), path, &raw);
  if (!s.ok()) {
    const std::string context = absl::StrCat("opening RocksDB at ", path);
    if (s.IsIOError() && absl::StrContains(s.ToString(), "lock")) {
      return absl::FailedPreconditionError(
          absl::StrCat(context, ": in use elsewhere: ", s.ToString()));
    }
    return FromRocksDb(s, context);
  }
  std::unique_ptr<RocksDbTier> tier(
      new RocksDbTier(path, std::unique_ptr<rocksdb::DB>(raw), options));
  if (absl::Status st = tier->LoadIds(); !st.ok()) return st;
  return tier;
}

absl::Status RocksDbTier::LoadIds() {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::StatusOr<uint64_t> id = IdOfKey(it->key());
    if (!id.ok()) return id.status();
    ids_.insert(*id);
  }
  return FromRocksDb(it->status(), absl::StrCat("scanning ", path_));
}

absl::Status RocksDbTier::CheckWritable() const {
  if (!options_.read_only) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(path_, " is open read-only"));
}

absl::Status RocksDbTier::Put(const ChunkRecord& record) {
  return PutRef(record);
}

absl::Status RocksDbTier::PutRef(const ChunkRecordRef& record) {
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  // The record's pieces go into the write batch as they are: the arrays
  // are copied once there, not first into an encoded string (a tile-sized
  // allocation, its page faults and a copy, per write).
  std::string scratch;
  std::vector<absl::string_view> pieces;
  STRATA_RETURN_IF_ERROR(EncodeChunkRecordPieces(record, &scratch, &pieces));
  std::vector<rocksdb::Slice> slices;
  size_t bytes = 0;
  for (absl::string_view p : pieces) {
    slices.emplace_back(p.data(), p.size());
    bytes += p.size();
  }
  const std::string key = Key(record.id);
  const rocksdb::Slice key_slice(key);
  rocksdb::WriteBatch batch(key.size() + bytes + 32);
  rocksdb::Status s = batch.Put(
      nullptr, rocksdb::SliceParts(&key_slice, 1),
      rocksdb::SliceParts(slices.data(), static_cast<int>(slices.size())));
  if (!s.ok()) {
    return FromRocksDb(s, absl::StrCat(path_, ": put chunk ", record.id));
  }
  rocksdb::WriteOptions write;
  write.disableWAL = !options_.write_ahead_log;
  absl::MutexLock lock(&mu_);
  s = WriteResuming(*db_, [&] { return db_->Write(write, &batch); });
  if (!s.ok()) {
    return FromRocksDb(s, absl::StrCat(path_, ": put chunk ", record.id));
  }
  ids_.insert(record.id);
  return absl::OkStatus();
}

absl::StatusOr<ChunkRecord> RocksDbTier::Get(uint64_t id) const {
  rocksdb::ReadOptions read;
  read.verify_checksums = options_.verify_reads;
  rocksdb::PinnableSlice value;
  const rocksdb::Status s =
      db_->Get(read, db_->DefaultColumnFamily(), Key(id), &value);
  if (!s.ok()) return FromRocksDb(s, absl::StrCat(path_, ": chunk ", id));
  return DecodeStored(id, absl::string_view(value.data(), value.size()), path_);
}

absl::Status RocksDbTier::Delete(uint64_t id) {
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  rocksdb::WriteOptions write;
  write.disableWAL = !options_.write_ahead_log;
  absl::MutexLock lock(&mu_);
  if (!ids_.contains(id)) {
    return absl::NotFoundError(absl::StrCat(path_, ": no chunk ", id));
  }
  const rocksdb::Status s =
      WriteResuming(*db_, [&] { return db_->Delete(write, Key(id)); });
  if (!s.ok()) return FromRocksDb(s, absl::StrCat(path_, ": delete ", id));
  ids_.erase(id);
  return absl::OkStatus();
}

absl::Status RocksDbTier::ForEach(
    const std::function<absl::Status(const ChunkRecord&)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::StatusOr<uint64_t> id = IdOfKey(it->key());
    if (!id.ok()) return id.status();
    absl::StatusOr<ChunkRecord> record = DecodeStored(
        *id, absl::string_view(it->value().data(), it->value().size()), path_);
    if (!record.ok()) return record.status();
    if (absl::Status s = fn(*record); !s.ok()) return s;
  }
  return FromRocksDb(it->status(), absl::StrCat("scanning ", path_));
}

size_t RocksDbTier::size() const {
  absl::MutexLock lock(&mu_);
  return ids_.size();
}

absl::Status RocksDbTier::Flush() {
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  rocksdb::FlushOptions flush;
  flush.wait = true;
  rocksdb::Status s = WriteResuming(*db_, [&] { return db_->Flush(flush); });
  if (s.ok()) s = db_->SyncWAL();
  return FromRocksDb(s, absl::StrCat("flushing ", path_));
}

absl::Status RocksDbTier::Checkpoint(const std::string& dir) {
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db_.get(), &raw);
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  if (s.ok()) s = checkpoint->CreateCheckpoint(dir);
  return FromRocksDb(s, absl::StrCat("checkpoint of ", path_, " to ", dir));
}

}  // namespace strata
