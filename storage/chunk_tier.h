// The chunk store's tiers: one interface, kept in RAM (RamTier) or in
// RocksDB on local disk (RocksDbTier).
//
// A later store composes them: a RamTier under a byte budget
// (RamTier::bytes()) in front of a RocksDbTier on NVMe. It moves cold
// chunks down with Put + Delete, optimizer state first (a state-only
// ChunkRecord, the weights staying in RAM), and prefetches them back in push
// order with Get. Every tier therefore stores whole, self-checking records
// keyed by chunk id and is safe to call from many threads.
#ifndef STRATA_STORAGE_CHUNK_TIER_H_
#define STRATA_STORAGE_CHUNK_TIER_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/chunk_record.h"

namespace strata {

// A map from chunk id to ChunkRecord. Implementations are thread-safe: any
// method may be called from any thread at any time.
class ChunkTier {
 public:
  virtual ~ChunkTier() = default;

  // Stores a copy of `record` under record.id, replacing any record there.
  // INVALID_ARGUMENT if ValidateChunkRecord rejects it; other codes for
  // failures of the medium.
  virtual absl::Status Put(const ChunkRecord& record) = 0;

  // Returns a copy of the record with `id`. NOT_FOUND if there is none;
  // DATA_LOSS if the stored bytes are corrupt.
  virtual absl::StatusOr<ChunkRecord> Get(uint64_t id) const = 0;

  // Removes the record with `id`. NOT_FOUND if there is none.
  virtual absl::Status Delete(uint64_t id) = 0;

  // Calls fn on every record, in increasing id order, and stops at the
  // first error fn returns (which ForEach returns). Records Put or Deleted
  // concurrently may or may not be seen. fn must not call back into this
  // tier. DATA_LOSS if a stored record is corrupt.
  virtual absl::Status ForEach(
      const std::function<absl::Status(const ChunkRecord&)>& fn) const = 0;

  // The number of records held.
  virtual size_t size() const = 0;
};

}  // namespace strata

#endif  // STRATA_STORAGE_CHUNK_TIER_H_
