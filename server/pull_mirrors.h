// Compressed pulls (ps.proto PullRequest.delta_base): for each worker and
// chunk it pulls compressed, the server keeps a copy m of what the worker
// holds. A pull sends C(w - m), the chunk's weights' change since,
// compressed (common/compress.h), and adds D(C(w - m)) to m, the same
// float additions the worker makes to its own copy, so the two copies stay
// bit-identical. What the encoding left out, w - m, is in the next pull's
// delta: error feedback on the pull side, kept by the server.
//
// A pull whose base is not the copy's (a first pull, a worker or server
// that restarted, an answer lost on the way), or of a chunk rolled back
// since the copy was made, gets the whole weights in fp32 instead, and the
// copy starts again from them. Sequence numbers start at
// a random point per server, so a restarted server never takes a base a
// worker kept from before for its own.
//
// Memory: a chunk's floats per worker that pulls it compressed, in RAM
// (outside the shard's --ram_budget, which covers weights and optimizer
// state); dropped when the worker leaves the view.
#ifndef STRATA_SERVER_PULL_MIRRORS_H_
#define STRATA_SERVER_PULL_MIRRORS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/gradient_pool.h"
#include "strata/v1/ps.pb.h"

namespace strata {

class PullMirrors {
 public:
  // A pull's scratch (the delta and its decoding, a chunk's floats each)
  // comes from `scratch` and goes back to it: buffers per thread (one
  // pair for each of the pull handlers, first used at once by a step's
  // many pulls) cost page faults that took a third of the CPU of a
  // compressed 124M step (docs/BENCHMARKS.md).
  explicit PullMirrors(GradientPool& scratch);

  // What a compressed pull was answered with (PullResponse's fields).
  struct Served {
    v1::DType dtype = v1::DTYPE_F32;  // F32: the whole weights
    uint64_t base = 0;
    uint64_t seq = 0;
    size_t bytes = 0;  // written to the allocator's space
  };
  // Answers member's compressed pull of chunk req.chunk_id() (req: its
  // dtype, delta_base and topk_ratio; INVALID_ARGUMENT for a ratio outside
  // (0, 1]) from the chunk's weights w[0, n) in rollback `generation`,
  // into space from `alloc` (called once; nullptr: INVALID_ARGUMENT).
  // UNAVAILABLE when live(member) is false (asked once its copy is found,
  // so none outlives a Retain that dropped the member). REQUIRES: the
  // chunk's lock held, so pulls of one chunk do not overlap.
  absl::StatusOr<Served> Serve(uint64_t member, const v1::PullRequest& req,
                               const float* w, size_t n, uint64_t generation,
                               absl::FunctionRef<bool(uint64_t)> live,
                               absl::FunctionRef<char*(size_t)> alloc);
  // Drops the copies of every member for which live(member) is false.
  void Retain(const std::function<bool(uint64_t)>& live);
  // Floats held in copies.
  uint64_t floats() const;
  // The copy kept for member's chunk (empty: none), for tests.
  // REQUIRES: no pull of the chunk under way.
  std::vector<float> CopyOf(uint64_t member, uint64_t chunk_id);

 private:
  struct Mirror {
    uint64_t seq = 0;         // 0: no copy yet
    uint64_t generation = 0;  // the chunk's when the copy started
    std::vector<float> w;     // under the chunk's lock; its size is fixed
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (member, chunk id)
  // The copy for `key` of n floats, new (seq 0) when there was none of
  // that size.
  std::shared_ptr<Mirror> Find(const Key& key, size_t n);
  // Drops key's copy if it is still m.
  void Drop(const Key& key, const std::shared_ptr<Mirror>& m);
  // Writes w whole to alloc's space and makes m a copy of it.
  absl::StatusOr<Served> Rebase(Mirror& m, const float* w, size_t n,
                                uint64_t generation,
                                absl::FunctionRef<char*(size_t)> alloc);

  GradientPool& scratch_;
  std::atomic<uint64_t> next_seq_;
  mutable absl::Mutex mu_;
  // shared_ptr: a pull serving from a copy keeps it while Retain drops it.
  absl::flat_hash_map<Key, std::shared_ptr<Mirror>> mirrors_
      ABSL_GUARDED_BY(mu_);
  uint64_t floats_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_SERVER_PULL_MIRRORS_H_
