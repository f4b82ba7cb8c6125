// Deferred pushes (ps.proto PushRequest.deferred) and their Commit: a
// worker's gradients held, checked, until it knows the factor its
// clipping scales them by; then applied in the order that serves its next
// pulls first.
#ifndef STRATA_SERVER_DEFERRED_COMMITS_H_
#define STRATA_SERVER_DEFERRED_COMMITS_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/gradient_pool.h"
#include "server/shard_options.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Members whose latest commit failed on this shard, and its step: that
// step cannot close until they redo it, so their BSP pulls waiting for it
// are answered ABORTED at once (a worker pulls while its commit is still
// applying). Thread-safe; a leaf lock (taken under a chunk's, and under
// DeferredCommits').
class FailedCommits {
 public:
  bool Failed(uint64_t member, int64_t step) const;
  void Set(uint64_t member, int64_t step);
  void Clear(uint64_t member);
  // Forgets the members for which `live` is false.
  void Forget(absl::FunctionRef<bool(uint64_t member)> live);
  // What a joining replica takes over from its primary (Shard::ExportState):
  // written into, and replacing this one's from, a state header.
  void Export(v1::ShardStateHeader* out) const;
  void Import(const v1::ShardStateHeader& in);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, int64_t> failed_ ABSL_GUARDED_BY(mu_);
};

struct DeferredCommitsOptions {
  // Apply a commit's pushes in the order the step's pulls came (first
  // layers first), else in the order the pushes came (see Commit).
  bool pull_order = true;
  // Apply them in parallel in any order (every tile in RAM), else in
  // parallel lanes that keep the list order (a RAM tier learns it).
  bool any_order = true;
};

// Thread-safe.
class DeferredCommits {
 public:
  DeferredCommits(DeferredCommitsOptions options, GradientPool& pool,
                  ShardCounters& counters, FailedCommits& failed)
      : options_(options), pool_(pool), counters_(counters), failed_(failed) {}

  // Holds a checked deferred push's gradient until its Commit; `pulled`:
  // when the chunk's first pull of the push's step came (0: not known).
  // The newest attempt of a (member, chunk) wins.
  void Hold(const v1::PushRequest& req, std::vector<float> grad,
            uint64_t pulled);
  // Drops what members for which `live` is false hold and remember.
  void Drop(absl::FunctionRef<bool(uint64_t member)> live);

  // Applies one held push: `apply(req, grad, scale)` takes the gradient
  // (moves it out) when it applies it.
  using ApplyFn = absl::FunctionRef<absl::StatusOr<v1::PushResponse>(
      const v1::PushRequest& req, std::vector<float>& grad, float scale)>;
  // Applies member req.member_id()'s held pushes of req.step() through
  // `apply` (ps.proto Commit). Their errors as apply's; ABORTED when this
  // holds another number of them than req.pushes(). A repeat of the
  // member's last commit (its answer was lost) gets the same answer
  // again. Notes a failure in FailedCommits until the member's next
  // deferred push or successful commit; *marked_failed says whether it did.
  absl::StatusOr<v1::CommitResponse> Commit(const v1::CommitRequest& req,
                                            ApplyFn apply, bool* marked_failed);

  // The held pushes and last commits, as FailedCommits::Export; Import
  // INVALID_ARGUMENT for a held gradient that is not whole floats.
  void Export(v1::ShardStateHeader* out);
  absl::Status Import(const v1::ShardStateHeader& in);

 private:
  struct Held {
    v1::PushRequest req;  // without payload
    std::vector<float> grad;
    uint64_t arrival = 0;  // when the push came
    uint64_t pulled = 0;   // when the chunk's first pull of its step came
  };
  // Each member's last commit and its answer, given again to a retry.
  struct LastCommit {
    int64_t step = -1;
    uint32_t pushes = 0;
    absl::StatusOr<v1::CommitResponse> result;
  };

  absl::StatusOr<v1::CommitResponse> ApplyCommit(const v1::CommitRequest& req,
                                                 ApplyFn apply);
  // Takes the member's held pushes of `step` (and drops its others).
  std::vector<Held> Take(uint64_t member, int64_t step);
  // Sorts `held` into the order they are applied in.
  void Order(std::vector<Held>& held) const;
  // Runs apply(i) for each i < n, in parallel, in options_'s order.
  void ForEachInOrder(int64_t n, absl::FunctionRef<void(int64_t i)> apply);

  const DeferredCommitsOptions options_;
  GradientPool& pool_;
  ShardCounters& counters_;
  FailedCommits& failed_;
  absl::Mutex mu_;
  uint64_t arrivals_ ABSL_GUARDED_BY(mu_) = 0;
  // By member, then chunk id.
  absl::flat_hash_map<uint64_t, absl::flat_hash_map<uint64_t, Held>> held_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, LastCommit> last_commit_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_DEFERRED_COMMITS_H_
