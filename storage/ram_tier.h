// A ChunkTier in process memory: the store's hot tier.
#ifndef STRATA_STORAGE_RAM_TIER_H_
#define STRATA_STORAGE_RAM_TIER_H_

#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "storage/chunk_tier.h"

namespace strata {

// Records held in RAM, each at a fixed address for its lifetime in the tier.
// Thread-safe; ForEach holds a shared lock while it runs.
class RamTier : public ChunkTier {
 public:
  RamTier() = default;
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  absl::Status Put(const ChunkRecord& record) override;
  // As Put, moving `record` in instead of copying it.
  absl::Status Put(ChunkRecord&& record);
  absl::StatusOr<ChunkRecord> Get(uint64_t id) const override;
  absl::Status Delete(uint64_t id) override;
  absl::Status ForEach(
      const std::function<absl::Status(const ChunkRecord&)>& fn) const override;
  size_t size() const override;

  // Returns the record with `id` for in-place reads and updates, or null.
  // The tier keeps ownership. The pointer stays valid until Delete(id) or
  // the tier's destruction; a Put of the same id overwrites the record at
  // the same address. The tier's lock guards only the map, not the record:
  // the owner (the server, which locks each chunk) must serialize every
  // access to the record, and must not Put or Delete `id`, or run ForEach
  // (e.g. a snapshot), while another thread uses the pointer. An update in
  // place that changes the record's size makes bytes() stale until the next
  // Put of that id.
  ChunkRecord* Find(uint64_t id);

  // The memory the records hold (ChunkRecordBytes summed), as of the last
  // Put or Delete of each.
  size_t bytes() const;

 private:
  struct Entry {
    std::unique_ptr<ChunkRecord> record;  // stable address for Find
    size_t bytes = 0;                     // as counted in bytes_
  };
  mutable absl::Mutex mu_;
  std::map<uint64_t, Entry> records_ ABSL_GUARDED_BY(mu_);  // ForEach order
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_STORAGE_RAM_TIER_H_
