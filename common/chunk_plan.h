// Tensors, chunks and their placement on servers.
//
// A model declares named tensors; each is cut into chunks of at most
// chunk_bytes of fp32. A chunk's id is a stable function of (tensor name,
// chunk index), so the same model spec gives the same ids in every run.
// Chunks are placed on shard slots by PlaceChunks: greedy least-loaded in
// plan order, a deterministic and balanced rule every client computes alike.
#ifndef STRATA_COMMON_CHUNK_PLAN_H_
#define STRATA_COMMON_CHUNK_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {

inline constexpr uint64_t kDefaultChunkBytes = 4ull << 20;

// A named fp32 tensor of a model.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::string group = "default";  // optimizer group
  // Chunks start at multiples of this many elements (0 or 1: anywhere):
  // an optimizer that factors a matrix by rows (Adafactor) wants each
  // chunk to hold whole rows. A chunk then holds the most whole rows
  // within chunk_bytes, and one row at least.
  uint64_t row_elems = 0;
  uint64_t numel() const;
};

// One contiguous run of a tensor.
struct ChunkInfo {
  uint64_t id = 0;
  int tensor = 0;       // index into ChunkPlan::tensors
  uint32_t index = 0;   // chunk index within the tensor
  uint64_t offset = 0;  // first element within the tensor
  uint64_t numel = 0;
  int shard = -1;  // slot, after PlaceChunks
};

// All chunks of a model, in plan order (tensor order, then chunk index).
struct ChunkPlan {
  std::vector<TensorSpec> tensors;
  std::vector<ChunkInfo> chunks;
  // chunks_of[t] lists the indices into `chunks` of tensor t, in order.
  std::vector<std::vector<int>> chunks_of;
  uint64_t chunk_bytes = kDefaultChunkBytes;
  uint64_t total_numel = 0;
};

// The stable id of chunk `index` of tensor `name` (64-bit FNV-1a).
uint64_t ChunkId(const std::string& name, uint32_t index);

// Cuts `tensors` into chunks. Errors: empty or duplicate names, a shape with
// a non-positive dimension, chunk_bytes not a positive multiple of 4, or two
// chunk ids colliding.
absl::StatusOr<ChunkPlan> MakeChunkPlan(
    std::vector<TensorSpec> tensors, uint64_t chunk_bytes = kDefaultChunkBytes);

// Assigns every chunk of `plan` to one of `num_shards` slots: each chunk in
// plan order goes to the slot with the fewest elements so far (ties: lowest
// slot). REQUIRES: num_shards > 0.
void PlaceChunks(ChunkPlan& plan, int num_shards);

}  // namespace strata

#endif  // STRATA_COMMON_CHUNK_PLAN_H_
