// Bulk-synchronous steps (--consistency bsp). A chunk's open step t closes
// once every live worker of the view has pushed step t; the update is the
// sample-weighted mean of those pushes, summed in member-id order (so the
// result does not depend on arrival order). Pulls at clock c wait for
// version >= c. Each worker's share of a step's samples follows from the
// set of live workers it computed in, so when that set changes (a worker
// joins, leaves or dies) every open step is redone: its pushes computed
// for the old set are dropped (each push keeps the epoch it was computed
// in), pushes stamped with an older epoch than the view's workers_epoch
// are ABORTED (checked under the chunk's lock), and so are pulls still
// waiting for a step computed under an older epoch. The workers then
// recompute the step with the shares of the new set, so every sample of a
// closed step went into its update exactly once; the pushes closing a step
// are checked to tile one run of samples (Stats). A push for a step the
// chunk already closed changes nothing.
//
// With LAMB or Adafactor and a tensor cut into several chunks, a closed
// step's update waits for sums over the whole tensor (Chunk::sums): the
// step stays closed (pushes of it change nothing, a change of the live
// workers does not redo it) and is applied by the Reduce phases that the
// workers drive (ps.proto Reduce).
#ifndef STRATA_SERVER_BSP_GATE_H_
#define STRATA_SERVER_BSP_GATE_H_

#include "server/consistency_gate.h"

namespace strata {

class BspGate final : public ConsistencyGate {
 public:
  explicit BspGate(GateParts parts) : ConsistencyGate(parts) {}

  // From SSP/ASP, at the step the job goes back to BSP at
  // (now.switch_step, past every chunk's version: each SSP/ASP push moved
  // it once at most): c's version moves up to that step, each live
  // worker's clock there too (for the SSP gate's pulls until this gate is
  // current), its lifts are dropped, and c is marked so the SSP/ASP gate
  // applies no push to it meanwhile. Reads a spilled tile (its copy
  // carries the version).
  void Adopt(Chunk& c, const ShardView& now, const Consistency& from) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  bool AdoptReadsTile(const Consistency& from) const override {
    return from.mode != Consistency::kBsp;
  }
  // BSP checks the epoch in Push, under the chunk's lock.
  absl::Status CheckPushEpoch(const ShardView& view,
                              const v1::PushRequest& req) const override {
    return absl::OkStatus();
  }
  absl::StatusOr<v1::PushResponse> Push(Chunk& c, const v1::PushRequest& req,
                                        std::vector<float> grad,
                                        float scale) override;
  // Closes the steps only departed workers held open; drops pushes cut for
  // an older set of workers (the new set recomputes the step).
  void Sweep(Chunk& c, const ShardView& now) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // A worker's pull at clock c waits for version c (its own push of step c
  // must come first: a higher min_version is OUT_OF_RANGE).
  absl::StatusOr<uint64_t> PullTarget(Chunk& c, const v1::PullRequest& req,
                                      bool worker) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  bool Ready(const Chunk& c, const v1::PullRequest& req, bool worker,
             uint64_t need) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
    return c.rec.version >= need;
  }
  // ABORTED when the step waited for is being redone (the live workers
  // changed since the requester's epoch) or cannot close (the requester's
  // commit of it failed here).
  absl::Status CheckWaiting(const Chunk& c, const v1::PullRequest& req,
                            bool worker, uint64_t need) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // A worker's: a commit will serve it, most often the one applying now.
  bool PinsTile(bool worker) const override { return worker; }

  // One chunk of a Reduce (ps.proto) once c closed req.step(): its
  // partials of reduction req.phase(), after taking `in`'s totals of the
  // reduction before (the first to come win) and, after the last, applying
  // the update. REQUIRES: c's step req.step() closed or applied (or c.sums
  // of another step: FAILED_PRECONDITION unless long applied).
  absl::StatusOr<v1::ReducePartials> Reduce(Chunk& c,
                                            const v1::ReduceRequest& req,
                                            const v1::ReduceChunk& in) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Drops c's sums (a rollback), giving their gradient back.
  void ResetSums(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

 private:
  // The push's fencing under c's lock: its generation, its member live in
  // `now`, its epoch not older than the live workers', its step not ahead.
  absl::Status CheckPush(const Chunk& c, const v1::PushRequest& req,
                         const ShardView& now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Adds the push to c's open step; closes it if it is complete.
  absl::StatusOr<v1::PushResponse> Collect(Chunk& c, const v1::PushRequest& req,
                                           std::vector<float> grad,
                                           float scale);
  // Closes the open step of `c` if every live worker contributed, reading
  // its tile first if it is spilled: that read's error leaves the step open
  // (and is lost state: TileCache::set_lost_state_sink).
  absl::Status MaybeCloseStep(Chunk& c, const ShardView& view)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // The update of a complete step: the sample-weighted mean of its pushes
  // (or, waiting for its tensor's sums, that mean kept in c.sums).
  void CloseStep(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // What follows an applied update: a snapshot when one is due.
  void AfterApply(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // The staged update of c.sums' step.
  TensorStep SumsStep(const Chunk& c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Counts a tiling error if the open pushes of `c` do not cover one
  // contiguous run of samples.
  void CheckTiling(const Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Gives every open push's buffer back and empties the step.
  void ClearOpen(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
};

}  // namespace strata

#endif  // STRATA_SERVER_BSP_GATE_H_
