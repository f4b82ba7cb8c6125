#include "storage/ram_tier.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {

absl::Status RamTier::Put(const ChunkRecord& record) {
  return Put(ChunkRecord(record));
}

absl::Status RamTier::Put(ChunkRecord&& record) {
  if (absl::Status s = ValidateChunkRecord(record); !s.ok()) return s;
  const size_t record_bytes = ChunkRecordBytes(record);
  absl::MutexLock lock(&mu_);
  Entry& entry = records_[record.id];
  if (entry.record == nullptr) {
    entry.record = std::make_unique<ChunkRecord>(std::move(record));
  } else {
    *entry.record = std::move(record);  // same address: Find's contract
  }
  bytes_ = bytes_ - entry.bytes + record_bytes;
  entry.bytes = record_bytes;
  return absl::OkStatus();
}

absl::StatusOr<ChunkRecord> RamTier::Get(uint64_t id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) {
    return absl::NotFoundError(absl::StrCat("chunk ", id, " not in RAM tier"));
  }
  return *it->second.record;
}

absl::Status RamTier::Delete(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) {
    return absl::NotFoundError(absl::StrCat("chunk ", id, " not in RAM tier"));
  }
  bytes_ -= it->second.bytes;
  records_.erase(it);
  return absl::OkStatus();
}

absl::Status RamTier::ForEach(
    const std::function<absl::Status(const ChunkRecord&)>& fn) const {
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [id, entry] : records_) {
    if (absl::Status s = fn(*entry.record); !s.ok()) return s;
  }
  return absl::OkStatus();
}

size_t RamTier::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return records_.size();
}

ChunkRecord* RamTier::Find(uint64_t id) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : it->second.record.get();
}

size_t RamTier::bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return bytes_;
}

}  // namespace strata
