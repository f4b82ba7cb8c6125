// The Shard's settings (ShardOptions), counters (ShardCounters), what a
// pull returns besides its data, and the callbacks a Shard reports
// snapshots and applied updates through (server/shard.h).
#ifndef STRATA_SERVER_SHARD_OPTIONS_H_
#define STRATA_SERVER_SHARD_OPTIONS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/consistency.h"
#include "storage/chunk_tier.h"
#include "storage/spill_store.h"
#include "strata/v1/ledger.pb.h"
#include "strata/v1/ps.pb.h"

namespace strata {

struct ShardOptions {
  Consistency consistency;
  // Longest a pull (or a push waiting for the view) may wait at the gate
  // before DEADLINE_EXCEEDED.
  absl::Duration max_wait = absl::Seconds(120);
  // How long a push from a member not yet in this shard's view waits for the
  // view to catch up before FAILED_PRECONDITION.
  absl::Duration view_wait = absl::Seconds(5);
  // Requests waiting for a view or rollback generation this shard has not
  // reached, per member and in all: one more is UNAVAILABLE at once (the
  // client retries). A wait holds a handler thread, and its member cannot
  // be told from a stranger until the view comes: these keep requests
  // stamped with a future epoch (a flood of them, from anyone) from
  // holding the threads the job's pushes need.
  int max_view_waits_per_member = 4;
  int max_view_waits = 8;
  // BSP: capture a consistent snapshot every N closed steps (0: never).
  int64_t snapshot_every = 0;
  // Largest chunk a peer may register (each costs up to 3x in RAM with
  // Adam's state); a bigger one is INVALID_ARGUMENT.
  uint64_t max_chunk_bytes = 256ull << 20;
  // Pulls waiting at the gate at once, per live worker and for all other
  // requesters together; one more is RESOURCE_EXHAUSTED. A waiting pull
  // holds a handler thread: these keep a few requesters from holding them
  // all (a worker has at most PsClientOptions::max_in_flight_per_server).
  int max_waiting_pulls_per_worker = 64;
  int max_waiting_pulls_others = 16;
  // A pull for a version (or, under SSP, a clock) this many steps beyond
  // the chunk's can never be served before max_wait: OUT_OF_RANGE at once.
  uint64_t max_steps_ahead = 1 << 16;
  Clock* clock = Clock::Real();
  // A RAM budget for the chunks' tiles (weights, optimizer state) with the
  // rest spilled to disk (storage/spill_store.h; server/tile_cache.h);
  // null: every tile stays in RAM. Outside the budget: tiles in use at the
  // moment another is needed (at most one per handler thread and reader;
  // under BSP a tile read by a step's closing push until room is made
  // after its use), tiles kept for the pulls waiting on them
  // (SpillOptions::pinned_bytes at most),
  // open BSP steps' and deferred pushes' gradients, the gradient buffer
  // pool, the spill databases' memtables (two full ones each, an eighth of
  // the budget between them, 8 to 64 MiB), a record's copy in a write
  // batch while one is written (write-behind or spill), and a spilled
  // chunk's weights (twice: as read and decoded) for each pull reading
  // them.
  std::shared_ptr<SpillStore> spill;
};

// Counters, for Stats and tests.
struct ShardCounters {
  std::atomic<uint64_t> pushes_applied{0};
  std::atomic<uint64_t> summed_updates{0};  // steps applied through Reduce
  std::atomic<uint64_t> rejected_nonfinite{0};
  std::atomic<uint64_t> rejected_other{0};
  std::atomic<uint64_t> pulls{0};
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> bytes_out{0};
  // Compressed pulls answered with a delta, and with the whole weights.
  std::atomic<uint64_t> pulls_compressed{0};
  std::atomic<uint64_t> pulls_rebased{0};
  // Pushes without a payload (PushRequest.zero), and BSP chunk steps
  // closed on such pushes alone (no update).
  std::atomic<uint64_t> pushes_zero{0};
  std::atomic<uint64_t> zero_steps{0};
  std::atomic<uint64_t> bsp_samples_applied{0};
  std::atomic<uint64_t> bsp_tiling_errors{0};
  std::atomic<uint64_t> aborted_stale_epoch{0};
  std::atomic<uint64_t> aborted_rolled_back{0};
  // Pulls that had to wait at the consistency gate, and their wait in total.
  std::atomic<uint64_t> gate_waits{0};
  std::atomic<uint64_t> gate_wait_ns{0};
  std::atomic<int64_t> pulls_waiting{0};  // at the gate now
  // Pulls refused because their requester had too many waiting already.
  std::atomic<uint64_t> rejected_busy{0};
  // Requests that waited for this shard to reach the view epoch or the
  // rollback generation they were stamped with (counted as they start),
  // and those refused because their member or all had their fill waiting.
  std::atomic<uint64_t> view_waits{0};
  std::atomic<uint64_t> view_waits_refused{0};
};

// What a pull returns besides the data.
struct PullResult {
  uint64_t version = 0;
  int64_t min_clock = 0;
  // A compressed pull's answer (ps.proto PullResponse): what the payload
  // is (F32: the whole weights) and the bases it goes from and to.
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  uint64_t delta_base = 0;
  uint64_t delta_seq = 0;
};

// Called with a complete, consistent capture of every chunk at `step`
// (BSP auto-snapshots). Runs on the thread that closed the last chunk.
// The capture is in RAM, or on the spill disk for a shard with a budget.
using SnapshotSink = std::function<void(uint64_t generation, int64_t step,
                                        std::unique_ptr<ChunkTier> capture)>;

// Called with each update every chunk of the shard has applied (slot unset;
// server/applied_tracker.h). Runs under a chunk's lock: it must be quick and
// must not call back into the Shard.
using AppliedSink = std::function<void(const v1::AppliedReport& report)>;

}  // namespace strata

#endif  // STRATA_SERVER_SHARD_OPTIONS_H_
