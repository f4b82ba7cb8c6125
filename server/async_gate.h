// Asynchronous updates: every push is applied to its chunk as it comes.
//  - asp (AspGate, --consistency asp): pulls wait only for an explicit
//    min_version.
//  - ssp:s (SspGate, --consistency ssp:s): a worker's pull at clock c
//    waits until every live worker's clock on that chunk (the steps it
//    pushed there) is >= c - s; a drained worker's (Member.drained: every
//    sample handed out to others, so it pushes nothing more) is not
//    waited for.
// A gradient computed under an older view is still a valid gradient, so
// only an epoch from before its member joined is stale.
#ifndef STRATA_SERVER_ASYNC_GATE_H_
#define STRATA_SERVER_ASYNC_GATE_H_

#include "server/consistency_gate.h"

namespace strata {

class AspGate : public ConsistencyGate {
 public:
  explicit AspGate(GateParts parts) : ConsistencyGate(parts) {}

  // ABORTED for an epoch from before the member joined: it cannot be this
  // member's current work.
  absl::Status CheckPushEpoch(const ShardView& view,
                              const v1::PushRequest& req) const override;
  // Applies the gradient at once; a step the member already pushed to c
  // (a retry whose reply was lost) is applied once.
  absl::StatusOr<v1::PushResponse> Push(Chunk& c, const v1::PushRequest& req,
                                        std::vector<float> grad,
                                        float scale) override;
  // From BSP: each live worker's clock on c starts at c's version (the
  // fence step: every step before it closed here, none at or after it
  // leased), so a retried BSP push is applied once and SSP pulls wait for
  // no worker that has not pushed here yet. Pushes held open for a BSP
  // step (none are expected at the fence) are dropped. From SSP or ASP:
  // the live workers seen on c are levelled (c.lift: each one's lifted
  // clock made the largest), so a tighter SSP bound counts from the
  // switch: the drift the looser mode allowed holds no one back.
  void Adopt(Chunk& c, const ShardView& now, const Consistency& from) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Forgets the clocks of workers that left, so SSP pulls no longer wait
  // for them.
  void Sweep(Chunk& c, const ShardView& now) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  absl::StatusOr<uint64_t> PullTarget(Chunk& c, const v1::PullRequest& req,
                                      bool worker) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  bool Ready(const Chunk& c, const v1::PullRequest& req, bool worker,
             uint64_t need) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
    return c.rec.version >= need;
  }

 protected:
  // `member` was just seen on c for the first time (its first push, or an
  // SSP pull): after a switch that levelled the others (c.lift not empty),
  // its lifted clock is made the slowest live working worker's seen on c,
  // so it holds no one back for the drift before it came.
  void LevelNewcomer(Chunk& c, uint64_t member) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

 private:
  absl::StatusOr<v1::PushResponse> ApplyNow(Chunk& c,
                                            const v1::PushRequest& req,
                                            const std::vector<float>& grad,
                                            float scale);
};

class SspGate final : public AspGate {
 public:
  SspGate(GateParts parts, int64_t staleness)
      : AspGate(parts), staleness_(staleness) {}

  // A worker's pull at clock c also notes c as its clock here (a worker
  // not yet seen is not taken for one at clock 0; after a switch between
  // asynchronous modes it is levelled: LevelNewcomer), and is
  // OUT_OF_RANGE when c is too far
  // ahead to come before its deadline. Its wait: until every live working
  // worker's lifted clock on c is >= its own lifted clock - staleness.
  absl::StatusOr<uint64_t> PullTarget(Chunk& c, const v1::PullRequest& req,
                                      bool worker) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  bool Ready(const Chunk& c, const v1::PullRequest& req, bool worker,
             uint64_t need) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

 private:
  const int64_t staleness_;
};

}  // namespace strata

#endif  // STRATA_SERVER_ASYNC_GATE_H_
