// The chunks a shard holds and the optimizer groups they belong to:
// registration (every check before any change), creation from an init or
// a snapshot record, and lookup by id.
#ifndef STRATA_SERVER_CHUNK_TABLE_H_
#define STRATA_SERVER_CHUNK_TABLE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/chunk.h"
#include "server/init.h"
#include "strata/v1/ps.pb.h"

namespace strata {

struct ChunkTableOptions {
  // Largest chunk a peer may register (ShardOptions::max_chunk_bytes).
  uint64_t max_chunk_bytes = 256ull << 20;
  // The RAM budget a chunk's tile (weights and optimizer state) must fit
  // in; 0: none.
  uint64_t tile_budget = 0;
  // Called for each new chunk, under its lock, before it is in the table:
  // takes it into the RAM tier (server/tile_cache.h). An error refuses the
  // chunk. Unset: nothing to do.
  std::function<absl::Status(Chunk& c)> admit;
};

// Thread-safe; one lock for the table. Chunks and groups live as long as
// the table.
class ChunkTable {
 public:
  explicit ChunkTable(ChunkTableOptions options);

  // Declares groups and chunks (idempotent; see ps.proto RegisterChunks).
  // Checks the whole request before creating anything, except that a
  // chunk the tier refuses leaves the request's earlier ones registered.
  absl::StatusOr<v1::RegisterChunksResponse> Register(
      const v1::RegisterChunksRequest& req);
  // The groups of snapshot metadata (GroupsMetadata), registered.
  absl::Status RegisterGroups(const std::string& metadata);
  // One snapshot record as a new chunk (its arrays moved in); nothing for
  // a chunk already held. DATA_LOSS for a corrupt record or one whose
  // group is not registered.
  absl::Status RestoreChunk(ChunkRecord rec);

  // INVALID_ARGUMENT for a chunk this table does not hold.
  absl::StatusOr<Chunk*> Find(uint64_t id) const;
  std::vector<Chunk*> All() const;
  size_t size() const { return size_.load(); }
  // Serialized GroupSpecs (snapshot metadata), sorted by name.
  std::string GroupsMetadata() const;

  // Chunks created from now on are in rollback `generation`, begun at
  // `step`. Returns the chunks created before, which the shard's rollback
  // moves itself (ShardMembership's generation says when all have moved).
  std::vector<Chunk*> StartGeneration(uint64_t generation, int64_t step);
  // The generation StartGeneration began last, and its step.
  std::pair<uint64_t, int64_t> generation_start() const;

  // A chunk spec's own checks (name, id, size, shape, overflow).
  static absl::Status ValidateSpec(const v1::ChunkSpec& s,
                                   uint64_t max_chunk_bytes);

 private:
  // A new chunk from `restored` (moved from), or from its init (reading
  // init files through `files`, if given).
  absl::Status Create(const v1::ChunkSpec& spec, const ChunkGroup* group,
                      ChunkRecord* restored, InitFiles* files)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Register's checks of one chunk spec, against the table and the groups
  // and shapes the request adds.
  absl::Status CheckChunk(
      const v1::ChunkSpec& s,
      const absl::flat_hash_map<std::string, OptimizerParams>& new_groups,
      absl::flat_hash_map<std::string, std::vector<int64_t>>& shapes,
      InitFiles* files) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ChunkTableOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<ChunkGroup>> groups_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::unique_ptr<Chunk>> chunks_
      ABSL_GUARDED_BY(mu_);
  // tensor name -> shape, to refuse one name registered with two shapes.
  absl::flat_hash_map<std::string, std::vector<int64_t>> tensor_shapes_
      ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> size_{0};
};

}  // namespace strata

#endif  // STRATA_SERVER_CHUNK_TABLE_H_
