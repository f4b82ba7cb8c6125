#include "common/chunk_plan.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace strata {

uint64_t TensorSpec::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t ChunkId(const std::string& name, uint32_t index) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 1099511628211ull;
  };
  for (unsigned char c : name) mix(c);
  mix(0);  // separator: ("ab", 1) and ("a", ...) never share a prefix
  for (int i = 0; i < 4; ++i) mix(static_cast<unsigned char>(index >> (8 * i)));
  return h == 0 ? 1 : h;  // 0 is reserved for "no chunk"
}

absl::StatusOr<ChunkPlan> MakeChunkPlan(std::vector<TensorSpec> tensors,
                                        uint64_t chunk_bytes) {
  if (chunk_bytes == 0 || chunk_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes must be a positive multiple of 4, got ", chunk_bytes));
  }
  ChunkPlan plan;
  plan.chunk_bytes = chunk_bytes;
  const uint64_t per_chunk = chunk_bytes / 4;
  absl::flat_hash_set<std::string> names;
  absl::flat_hash_set<uint64_t> ids;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorSpec& spec = tensors[t];
    if (spec.name.empty())
      return absl::InvalidArgumentError("tensor with an empty name");
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate tensor name '", spec.name, "'"));
    }
    if (spec.shape.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name, "' has no shape"));
    }
    for (int64_t d : spec.shape) {
      if (d <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", spec.name, "' has a non-positive dimension ", d));
      }
    }
    const uint64_t n = spec.numel();
    uint64_t step = per_chunk;
    if (spec.row_elems > 1) {
      step =
          std::max(spec.row_elems, per_chunk / spec.row_elems * spec.row_elems);
    }
    plan.chunks_of.emplace_back();
    uint32_t index = 0;
    for (uint64_t off = 0; off < n; off += step, ++index) {
      ChunkInfo c;
      c.id = ChunkId(spec.name, index);
      c.tensor = static_cast<int>(t);
      c.index = index;
      c.offset = off;
      c.numel = std::min(step, n - off);
      if (!ids.insert(c.id).second) {
        return absl::InternalError(
            absl::StrCat("chunk id collision at '", spec.name, "' #", index));
      }
      plan.chunks_of.back().push_back(static_cast<int>(plan.chunks.size()));
      plan.chunks.push_back(c);
    }
    plan.total_numel += n;
  }
  plan.tensors = std::move(tensors);
  return plan;
}

void PlaceChunks(ChunkPlan& plan, int num_shards) {
  STRATA_CHECK(num_shards > 0);
  std::vector<uint64_t> load(num_shards, 0);
  for (ChunkInfo& c : plan.chunks) {
    int best = 0;
    for (int s = 1; s < num_shards; ++s) {
      if (load[s] < load[best]) best = s;
    }
    c.shard = best;
    load[best] += c.numel;
  }
}

}  // namespace strata
