// A Reduce (ps.proto): the phases of a BSP step whose update needs sums
// over whole tensors (LAMB, Adafactor; server/bsp_gate.h). The wait for
// each chunk's step to close is here; what a phase computes is the gate's.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/shard.h"
#include "server/shard_parts.h"

namespace strata {
namespace {

// More phases than any optimizer has: a request beyond is malformed.
constexpr int kMaxPhase = 8;

// Whether c's step `step` closed (its update waits for sums, or was
// applied).
bool Closed(const Chunk& c, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  return c.sums.step == step || c.rec.version > static_cast<uint64_t>(step);
}

}  // namespace

absl::StatusOr<v1::ReduceResponse> Shard::Reduce(const v1::ReduceRequest& req) {
  if (req.step() < 0 || req.phase() < 0 || req.phase() > kMaxPhase) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce of step ", req.step(), " phase ", req.phase(),
                     ": a step >= 0 and a phase in [0, ", kMaxPhase, "]"));
  }
  STRATA_RETURN_IF_ERROR(
      p_->membership.AwaitGeneration(req.generation(), req.member_id()));
  const absl::Time deadline = absl::Now() + options_.max_wait;
  v1::ReduceResponse resp;
  for (const v1::ReduceChunk& in : req.chunks()) {
    STRATA_ASSIGN_OR_RETURN(Chunk * c, p_->table.Find(in.chunk_id()));
    absl::MutexLock lock(&c->mu);
    for (;;) {
      STRATA_RETURN_IF_ERROR(
          CheckChunkGeneration(*c, req.generation(), counters_));
      // Totals come only after every chunk gave its partials: a chunk
      // whose step is not closed then answers FAILED_PRECONDITION (gate).
      if (Closed(*c, req.step()) || req.phase() > 0) break;
      if (p_->membership.cancelled()) {
        return absl::UnavailableError("the server is shutting down");
      }
      if (req.epoch() > 0 && p_->membership.Get().workers_epoch > req.epoch()) {
        counters_.aborted_stale_epoch++;
        return absl::AbortedError(absl::StrCat(
            "step ", req.step(), " of chunk ", in.chunk_id(),
            " was computed in view epoch ", req.epoch(),
            " but the live workers changed since; redo it with the new "
            "view's shares"));
      }
      if (c->changed.WaitWithDeadline(&c->mu, deadline) &&
          !Closed(*c, req.step())) {
        return absl::DeadlineExceededError(absl::StrCat(
            "reduce of chunk ", in.chunk_id(), " waited ",
            absl::FormatDuration(options_.max_wait), " for step ", req.step(),
            " to close (version ", c->rec.version, ")"));
      }
    }
    STRATA_ASSIGN_OR_RETURN(*resp.add_chunks(),
                            p_->gates.Current().Reduce(*c, req, in));
  }
  return resp;
}

}  // namespace strata
