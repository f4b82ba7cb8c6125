// The parts a Shard composes (server/shard.h), private to shard*.cc.
#ifndef STRATA_SERVER_SHARD_PARTS_H_
#define STRATA_SERVER_SHARD_PARTS_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "server/applied_tracker.h"
#include "server/chunk.h"
#include "server/chunk_table.h"
#include "server/consistency_gate.h"
#include "server/deferred_commits.h"
#include "server/gate_set.h"
#include "server/gradient_pool.h"
#include "server/pull_mirrors.h"
#include "server/shard.h"
#include "server/shard_membership.h"
#include "server/snapshot_capture.h"
#include "server/tile_cache.h"
#include "server/wait_quota.h"

namespace strata {

// Declared in the order they are built, each taking references to those
// before it (the table alone calls the tier, built after it, and only once
// a chunk is registered). Destroyed in reverse: the tier's threads are
// joined while the table and its chunks, which their tasks use, exist.
struct Shard::Parts {
  Parts(const ShardOptions& o, ShardCounters& counters);

  GradientPool pool;
  ChunkTable table;
  TileCache tiles;
  ShardMembership membership;
  AppliedReports applied;
  SnapshotCapture snapshots;
  FailedCommits failed;
  DeferredCommits deferred;
  GateSet gates;         // the job's mode's, and those it switched from
  WaitQuota pull_waits;  // pulls waiting at the gate, by requester
  PullMirrors mirrors;   // what workers pulling compressed hold
  std::atomic<uint64_t> pull_arrivals{0};  // pulls so far (Chunk::step_pulls)
};

}  // namespace strata

#endif  // STRATA_SERVER_SHARD_PARTS_H_
