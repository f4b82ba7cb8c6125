// The order a shard's tiles are used in, learned as they are used: the
// same every step (a backward pass's pushes), so the RAM tier can read the
// next tiles before they are asked for (Next) and, when it must make room,
// spill the tile whose next use is farthest away (FarthestFirst: Belady's
// choice, with the learned order standing in for the future).
//
// For a cycle of N tiles through a budget of B, least-recently-used keeps
// the wrong ones: each tile is spilled just before it comes round again,
// and every use misses. Spilling the farthest next use instead keeps B - 1
// of the B tiles resident until their use and lets one slot cycle, so a
// step misses N - B + 1 times. The order must be the same every step:
// interleaved differently each time (a BSP commit on several threads), it
// does worse than least-recently-used (SpillOptions::Eviction::kFarthest).
//
// The order is learned from pairs of uses, so a backward pass
// (k+1, k -> k-1) and a forward one (k-1, k -> k+1) over the same tiles are
// told apart. Not thread-safe: its owner (SpillStore) locks.
#ifndef STRATA_STORAGE_LEARNED_ORDER_H_
#define STRATA_STORAGE_LEARNED_ORDER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace strata {

class LearnedOrder {
 public:
  // Tile `id` was used (a repeat of the latest use is ignored).
  void Use(uint64_t id);

  // Up to `n` tiles expected after `id`, following the learned order from
  // the tile used before id's latest use.
  std::vector<uint64_t> Next(uint64_t id, size_t n) const;

  // `ids` reordered to spill: first those the learned cycle does not hold
  // (kept in their given order, e.g. least recently used first), then the
  // rest by how far ahead of the latest use their next use is, farthest
  // first (the tile just used is the farthest: a whole cycle away).
  std::vector<uint64_t> FarthestFirst(const std::vector<uint64_t>& ids);

 private:
  // The successor of the pair (prev, at) if learned, else of `at` alone;
  // false if neither is known.
  bool Successor(bool have_prev, uint64_t prev, uint64_t at,
                 uint64_t* next) const;
  // Walks the learned order from the latest use until it comes back to it
  // (or repeats a tile, or finds no successor), numbering each tile met.
  void BuildCycle();

  // The tile used after each pair of tiles used one after the other, and
  // after each tile alone, last time seen.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, uint64_t> next2_;
  absl::flat_hash_map<uint64_t, uint64_t> next_;
  // The tile used before each tile's latest use.
  absl::flat_hash_map<uint64_t, uint64_t> before_;
  // The last two tiles used (last_ the latest); how many of them are set.
  uint64_t last_ = 0;
  uint64_t last2_ = 0;
  int seen_ = 0;
  // Bumped whenever a learned successor changes; the cycle below was built
  // at `cycle_version_` and is rebuilt when they differ.
  uint64_t version_ = 0;
  uint64_t cycle_version_ = ~uint64_t{0};
  // Each tile of the learned cycle and its place in it, walked from
  // `built_from_`; `closed_` if the walk came back to it.
  absl::flat_hash_map<uint64_t, size_t> place_;
  uint64_t built_from_ = 0;
  bool closed_ = false;
};

}  // namespace strata

#endif  // STRATA_STORAGE_LEARNED_ORDER_H_
