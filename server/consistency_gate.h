// A shard's consistency gate: when a worker's push is applied to a chunk,
// and how long a pull of that chunk waits. One implementation per
// consistency (common/consistency.h):
//  - bsp (server/bsp_gate.h): a chunk's open step t closes once every
//    live worker of the view has pushed step t; pulls at clock c wait for
//    version >= c; a change in the set of live workers redoes open steps.
//  - ssp:s (server/async_gate.h): pushes apply at once; a pull at clock c
//    waits until every live worker's clock on that chunk is >= c - s.
//  - asp (server/async_gate.h): pushes apply at once; pulls wait only for
//    an explicit min_version.
// The shard (server/shard.h) does what every mode shares: finding the
// chunk, decoding and checking the gradient, waiting for the request's view
// and generation, the wait loop, the copy out. The gates check the chunk's
// generation and the member's liveness again under the chunk's lock.
#ifndef STRATA_SERVER_CONSISTENCY_GATE_H_
#define STRATA_SERVER_CONSISTENCY_GATE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/consistency.h"
#include "server/applied_tracker.h"
#include "server/chunk.h"
#include "server/chunk_table.h"
#include "server/deferred_commits.h"
#include "server/gradient_pool.h"
#include "server/shard_membership.h"
#include "server/shard_options.h"
#include "server/snapshot_capture.h"
#include "server/tile_cache.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// The parts of its shard a gate works with; each outlives the gate.
struct GateParts {
  const ShardOptions& options;
  ShardCounters& counters;
  GradientPool& pool;
  TileCache& tiles;
  const ChunkTable& table;
  const ShardMembership& membership;
  AppliedReports& applied;
  SnapshotCapture& snapshots;
  const FailedCommits& failed_commits;
};

// Thread-safe: each call on a chunk runs under that chunk's lock (taken by
// Push, held by the caller of the others).
class ConsistencyGate {
 public:
  // The gate for `mode`.
  static std::unique_ptr<ConsistencyGate> Create(GateParts parts,
                                                 const Consistency& mode);
  virtual ~ConsistencyGate() = default;

  // The job switches to this gate's mode from `from` (a live switch,
  // server/gate_set.h): takes c over, while `from`'s gate still serves
  // (Shard::UpdateView makes this one current after every chunk). From BSP, at
  // its fence step, when no step at or after c's version was leased: each live
  // worker of `now` starts at clock c.rec.version. To BSP, once every SSP/ASP
  // lease was applied: c's version moves up to now.switch_step.
  virtual void Adopt(Chunk& c, const ShardView& now, const Consistency& from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {}
  // Whether Adopt from `from` needs c's tile in RAM (the caller makes room
  // first and lets it go after).
  virtual bool AdoptReadsTile(const Consistency& from) const { return false; }

  // The rule for the epoch a push from live member req.member_id() was
  // computed in, checked against the view it is live in: ABORTED for a
  // stale one.
  virtual absl::Status CheckPushEpoch(const ShardView& view,
                                      const v1::PushRequest& req) const = 0;
  // Takes a checked push's gradient, times `scale` (a commit's clipping
  // factor; 1: none): applies it to c now, or keeps it for c's open step.
  // Takes c's lock; gives the buffer back to the pool when done with it.
  // Errors as ps.proto Push's.
  virtual absl::StatusOr<v1::PushResponse> Push(Chunk& c,
                                                const v1::PushRequest& req,
                                                std::vector<float> grad,
                                                float scale) = 0;
  // After the view changed to `now`: what the workers that left held up
  // or counted on c is let go.
  virtual void Sweep(Chunk& c, const ShardView& now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) = 0;

  // The version a pull must wait for (`worker`: its requester is a live
  // worker); OUT_OF_RANGE for one that can never come. Notes what the
  // wait depends on.
  virtual absl::StatusOr<uint64_t> PullTarget(Chunk& c,
                                              const v1::PullRequest& req,
                                              bool worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) = 0;
  // Whether the pull can be served now.
  virtual bool Ready(const Chunk& c, const v1::PullRequest& req, bool worker,
                     uint64_t need) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) = 0;
  // An error that ends a pull's wait early: what it waits for will not
  // come. OK to go on waiting.
  virtual absl::Status CheckWaiting(const Chunk& c, const v1::PullRequest& req,
                                    bool worker, uint64_t need) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
    return absl::OkStatus();
  }
  // Whether a waiting pull keeps c's tile in RAM until it is served.
  virtual bool PinsTile(bool worker) const { return false; }
  // One chunk of a Reduce (ps.proto): BSP's (server/bsp_gate.h); the
  // others update each chunk on its own and answer FAILED_PRECONDITION.
  virtual absl::StatusOr<v1::ReducePartials> Reduce(
      Chunk& c, const v1::ReduceRequest& req, const v1::ReduceChunk& in)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
    return absl::FailedPreconditionError(
        "Reduce is for BSP: under SSP and ASP LAMB and Adafactor update each "
        "chunk as its own tensor");
  }

  // The lowest clock of a live worker on c (0 for one not seen on it).
  static int64_t MinClock(const Chunk& c, const ShardView& view)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // The lowest lifted clock (LiftedClock) over the live workers that are
  // not drained (ShardView.drained: they push nothing more unless a sample
  // comes back to them); INT64_MAX when none is left: SSP waits for these.
  static int64_t MinWorkingClock(const Chunk& c, const ShardView& view)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // A worker's clock on c plus its lift (Chunk::lift; 0 for a worker not
  // seen on c): what SSP's bound compares.
  static int64_t LiftedClock(const Chunk& c, uint64_t worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

 protected:
  explicit ConsistencyGate(GateParts parts) : parts_(parts) {}

  // OUT_OF_RANGE if `need` is too many steps beyond c's version to come
  // before the pull's deadline (ShardOptions::max_steps_ahead).
  absl::Status CheckReachable(const Chunk& c, const v1::PullRequest& req,
                              uint64_t need) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // The OUT_OF_RANGE error for a pull that can never be served.
  static absl::Status Unreachable(const Chunk& c, const v1::PullRequest& req,
                                  uint64_t need)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Notes that c applied (step, worker) for the data ledger.
  void NoteApplied(const Chunk& c, int64_t step, uint64_t worker,
                   uint64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

  GateParts parts_;
};

}  // namespace strata

#endif  // STRATA_SERVER_CONSISTENCY_GATE_H_
