// A pull: its wait at the consistency gate (ConsistencyGate decides what
// it waits for; the wait itself, its cap, its deadline and its counters
// are the same under every consistency) and the copy of the weights out.
#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/bf16.h"
#include "common/status.h"
#include "common/wire.h"
#include "server/shard.h"
#include "server/shard_parts.h"

namespace strata {

absl::StatusOr<PullResult> Shard::Pull(const v1::PullRequest& req,
                                       std::string* out) {
  return Pull(req, [out](size_t n) {
    out->resize(n);
    return out->data();
  });
}

absl::StatusOr<PullResult> Shard::Pull(const v1::PullRequest& req,
                                       PayloadAllocator alloc,
                                       std::optional<absl::Time> wait_from) {
  STRATA_ASSIGN_OR_RETURN(Chunk * c, p_->table.Find(req.chunk_id()));
  return PullChunk(*c, req, alloc, wait_from);
}

absl::StatusOr<PullResult> Shard::PullChunk(
    Chunk& c, const v1::PullRequest& req, PayloadAllocator alloc,
    std::optional<absl::Time> wait_from) {
  const bool compressed =
      req.dtype() == v1::DTYPE_ONEBIT || req.dtype() == v1::DTYPE_TOPK;
  if (req.dtype() != v1::DTYPE_F32 && req.dtype() != v1::DTYPE_BF16 &&
      req.dtype() != v1::DTYPE_UNSPECIFIED && !compressed) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown pull dtype ", req.dtype()));
  }
  if (compressed && (req.has_shm() || req.has_bulk())) {
    // Their answer's size (a delta, or the whole weights) is known only
    // once served; shared memory and bulk receives are sized before.
    return absl::InvalidArgumentError(
        "compressed pulls are answered in the message, not through shared "
        "memory or the bulk plane");
  }
  if (req.clock() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull clock ", req.clock(), ": a step (>= 0), or -1 for none"));
  }
  counters_.pulls++;
  const uint64_t arrival = ++p_->pull_arrivals;
  STRATA_RETURN_IF_ERROR(
      p_->membership.AwaitGeneration(req.generation(), req.member_id()));
  const bool worker = p_->membership.IsWorker(req.member_id());
  if (compressed && !worker) {
    // The server keeps a copy per puller: live workers only, dropped as
    // they leave. UNAVAILABLE: a joiner's first pulls may come before this
    // server has its view.
    return absl::UnavailableError(
        absl::StrCat("compressed pulls are for live workers; member ",
                     req.member_id(), " is not one in this server's view"));
  }
  // Once waiting, a pinning pull keeps the chunk's tile in RAM until it has
  // copied it; unpinned after the lock is let go.
  bool pinned = false;
  absl::Cleanup unpin = [&] {
    if (pinned) p_->tiles.Unpin(c);
  };
  absl::MutexLock lock(&c.mu);
  STRATA_ASSIGN_OR_RETURN(const uint64_t need,
                          p_->gates.Current().PullTarget(c, req, worker));
  if (worker && req.clock() >= 0 && req.generation() == c.generation) {
    c.NotePullOfStep(req.clock(), arrival);
  }
  return ServeAtGate(c, req, worker, need, alloc, wait_from, &pinned);
}

absl::StatusOr<PullResult> Shard::ServeAtGate(
    Chunk& c, const v1::PullRequest& req, bool worker, uint64_t need,
    PayloadAllocator alloc, std::optional<absl::Time> wait_from, bool* pinned) {
  const ConsistencyGate& gate = p_->gates.Current();
  const absl::Time start = absl::Now();
  const absl::Time deadline = wait_from.value_or(start) + options_.max_wait;
  bool waited = false;
  const uint64_t waiter = worker ? req.member_id() : 0;
  // Counts the wait however it ends (served, refused or timed out), the
  // copy out included: the pull holds its place under the cap until then.
  auto count_wait = absl::MakeCleanup([&] {
    if (!waited) return;
    counters_.gate_waits++;
    counters_.gate_wait_ns += absl::ToInt64Nanoseconds(absl::Now() - start);
    counters_.pulls_waiting--;
    p_->pull_waits.Leave(waiter);
  });
  for (;;) {
    // Before Ready: a rolled-back chunk may be at the version wanted, but
    // not with the weights this requester's step came from.
    STRATA_RETURN_IF_ERROR(
        CheckChunkGeneration(c, req.generation(), counters_));
    if (gate.Ready(c, req, worker, need)) return CopyOut(c, req, alloc);
    if (p_->membership.cancelled())
      return absl::UnavailableError("the server is shutting down");
    STRATA_RETURN_IF_ERROR(gate.CheckWaiting(c, req, worker, need));
    if (!waited) {
      // Every non-worker shares one place (0).
      const int cap = worker ? options_.max_waiting_pulls_per_worker
                             : options_.max_waiting_pulls_others;
      if (p_->pull_waits.Enter(waiter, cap) != WaitQuota::Full::kNo) {
        counters_.rejected_busy++;
        return absl::ResourceExhaustedError(absl::StrCat(
            "pull of chunk ", req.chunk_id(), ": ", cap, " pulls of ",
            worker ? absl::StrCat("worker ", req.member_id()) : "non-workers",
            " wait at the gate already"));
      }
      waited = true;
      counters_.pulls_waiting++;
      if (gate.PinsTile(worker)) {
        p_->tiles.Pin(c);
        *pinned = true;
      }
    }
    if (c.changed.WaitWithDeadline(&c.mu, deadline) &&
        !gate.Ready(c, req, worker, need)) {
      // What it was let wait: all of max_wait, or what its batch had left.
      const absl::Duration allowed =
          std::max(absl::ZeroDuration(), deadline - start);
      return absl::DeadlineExceededError(absl::StrCat(
          "pull of chunk ", req.chunk_id(), " waited ",
          absl::FormatDuration(allowed), " at the gate",
          wait_from.has_value()
              ? absl::StrCat(" (what its batch had left of max_wait ",
                             absl::FormatDuration(options_.max_wait), ")")
              : "",
          " (version ", c.rec.version, ", wanted ", need, ")"));
    }
  }
}

absl::StatusOr<PullResult> Shard::CopyOut(Chunk& c, const v1::PullRequest& req,
                                          PayloadAllocator alloc) {
  ChunkRecord from_disk;
  STRATA_ASSIGN_OR_RETURN(const float* weights,
                          p_->tiles.WeightsToPull(c, &from_disk));
  PullResult result;
  result.version = c.rec.version;
  result.min_clock = ConsistencyGate::MinClock(c, p_->membership.Get());
  const size_t n = c.spec.numel();
  if (req.dtype() == v1::DTYPE_ONEBIT || req.dtype() == v1::DTYPE_TOPK) {
    STRATA_ASSIGN_OR_RETURN(
        const PullMirrors::Served s,
        p_->mirrors.Serve(
            req.member_id(), req, weights, n, c.generation,
            [this](uint64_t m) { return p_->membership.IsWorker(m); }, alloc));
    (s.dtype == v1::DTYPE_F32 ? counters_.pulls_rebased
                              : counters_.pulls_compressed)++;
    result.dtype = s.dtype;
    result.delta_base = s.base;
    result.delta_seq = s.seq;
    counters_.bytes_out += s.bytes;
    return result;
  }
  const size_t bytes = n * ElementBytes(req.dtype());
  char* out = alloc(bytes);
  if (out == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the pull's destination cannot hold chunk ",
                     req.chunk_id(), "'s ", bytes, " bytes"));
  }
  if (req.dtype() == v1::DTYPE_BF16) {
    FloatToBf16(weights, reinterpret_cast<uint16_t*>(out), n);
  } else {
    std::memcpy(out, weights, bytes);
  }
  counters_.bytes_out += bytes;
  return result;
}

}  // namespace strata
