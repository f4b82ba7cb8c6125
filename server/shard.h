// The state of one parameter-server shard: its chunks (weights, optimizer
// state, version), the job's consistency gate, and the update rule. It knows
// nothing of gRPC; server/parameter_server.cc adapts it to the wire. Its
// settings, counters and callback types are in server/shard_options.h.
// Implemented in shard.cc (chunk table, push and pull entry points),
// shard_view.cc (live workers, generations, membership checks),
// shard_gate.cc (the update rules below), shard_deferred.cc (deferred
// pushes and their commit), shard_tier.cc (the RAM budget) and
// shard_snapshot.cc (captures, restores and rollbacks).
//
// Consistency:
//  - bsp: a chunk's open step t closes once every live worker of the view has
//    pushed step t; the update is the sample-weighted mean of those pushes,
//    summed in member-id order (so the result does not depend on arrival
//    order). Pulls at clock c wait for version >= c. Each worker's share of
//    a step's samples follows from the set of live workers it computed in,
//    so when that set changes (a worker joins, leaves or dies) every open
//    step is redone: its pushes computed for the old set are dropped (each
//    push keeps the epoch it was computed in), pushes stamped with an older
//    epoch than the view's workers_epoch are ABORTED (checked under
//    the chunk's lock), and so are pulls still waiting for a step computed
//    under an older epoch. The workers
//    then recompute the step with the shares of the new set, so every
//    sample of a closed step went into its update exactly once; the pushes
//    closing a step are checked to tile one run of samples (Stats).
//    A push for a step the chunk already closed changes nothing.
//  - ssp:s: pushes apply at once; a pull at clock c waits until every live
//    worker's clock on that chunk is >= c - s.
//  - asp: pushes apply at once; pulls wait only for an explicit min_version.
//
// Rollbacks (BSP; View.generation): RollBack puts every chunk back to a
// snapshot's state (or the initial weights for step 0) in a new generation.
// Pushes and pulls carry the generation they were computed in: an older
// one than the chunk's is ABORTED (checked under the chunk's lock, so
// nothing computed before the rollback is applied after it), a newer one
// waits up to view_wait for this shard to roll back (then UNAVAILABLE).
#ifndef STRATA_SERVER_SHARD_H_
#define STRATA_SERVER_SHARD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/consistency.h"
#include "common/thread_pool.h"
#include "optim/optimizer.h"
#include "server/applied_tracker.h"
#include "server/init.h"
#include "server/shard_options.h"
#include "storage/ram_tier.h"
#include "storage/spill_store.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Thread-safe. Each chunk has its own lock, so pushes and pulls of different
// chunks run in parallel; the view and the chunk table have one lock each.
class Shard {
 public:
  explicit Shard(ShardOptions options);
  ~Shard();

  // Declares groups and chunks (idempotent; see ps.proto RegisterChunks).
  absl::StatusOr<v1::RegisterChunksResponse> Register(
      const v1::RegisterChunksRequest& req);

  // Applies a new view: the live workers and the epochs they joined at.
  // BSP: when the set of live workers changed, drops every open step's
  // pushes (the step is redone with the new shares) and wakes the pulls
  // waiting for them (ABORTED).
  void UpdateView(const v1::View& view);

  // Copies bytes [begin, begin + n) of a push's payload (payload_bytes
  // long) to dst[0..n). Called with increasing `begin`; an error (the
  // payload is no longer there to read) fails the push with it.
  using PayloadReader =
      absl::FunctionRef<absl::Status(char* dst, size_t begin, size_t n)>;
  // Gives `n` bytes of output space for a pull's payload; nullptr when it
  // has not that much (the pull fails with INVALID_ARGUMENT).
  using PayloadAllocator = absl::FunctionRef<char*(size_t n)>;

  // Handles one gradient push whose payload (numel values in req.dtype();
  // req.data() is ignored) is `payload_bytes` long and is copied out by
  // `read` only once the request has been validated, straight into the
  // buffer it is kept in. Errors as in ps.proto.
  absl::StatusOr<v1::PushResponse> Push(const v1::PushRequest& req,
                                        size_t payload_bytes,
                                        PayloadReader read);
  // Convenience: the payload in `data`.
  absl::StatusOr<v1::PushResponse> Push(const v1::PushRequest& req,
                                        absl::string_view data);

  // OK when `member` is a live worker in this shard's view, once the view
  // has reached `epoch` (waiting up to view_wait): UNAVAILABLE if it has
  // not, FAILED_PRECONDITION for a member that is not a live worker.
  absl::Status AwaitWorker(uint64_t member, uint64_t epoch);

  // Applies member req.member_id()'s deferred pushes of req.step(), each
  // scaled by req.scale() first (ps.proto Commit). Their errors as Push's;
  // ABORTED when the shard holds another number of them than req.pushes().
  // A repeat of the member's last commit (its answer was lost) gets the
  // same answer again. After a failed commit, the member's BSP pulls
  // waiting for the step to close are answered ABORTED (it will not close
  // until the member redoes it), until its next deferred push.
  absl::StatusOr<v1::CommitResponse> Commit(const v1::CommitRequest& req);

  // Serves a pull: waits at the gate, then writes the chunk's weights in
  // req.dtype() to space from `alloc` (called once, under the chunk's lock).
  absl::StatusOr<PullResult> Pull(const v1::PullRequest& req,
                                  PayloadAllocator alloc);
  // Convenience: the weights into `out` (resized to fit).
  absl::StatusOr<PullResult> Pull(const v1::PullRequest& req, std::string* out);

  // Copies every chunk's current state into a new tier: in RAM, or on the
  // spill disk for a shard with a budget (each chunk is copied under its
  // own lock; callers wanting a cross-chunk consistent cut use
  // auto-snapshots in BSP, or quiesce workers first).
  absl::StatusOr<std::unique_ptr<ChunkTier>> CaptureAll() const;

  // An empty tier for captures and loaded snapshots: in RAM, or on the
  // spill disk for a shard with a budget (whose state may not fit in RAM).
  absl::StatusOr<std::unique_ptr<ChunkTier>> NewScratchTier() const;

  // Serialized GroupSpecs (snapshot metadata) and restoring from a snapshot.
  std::string GroupsMetadata() const;
  absl::Status Restore(const std::string& metadata, const ChunkTier& records);

  // Rolls every chunk back to `records` (a snapshot of `step` with its
  // `metadata`; both null for step 0: every chunk to its initial weights
  // and empty optimizer state) in rollback generation `generation`, which
  // must be newer than the shard's. Open BSP steps, SSP clocks, pending
  // snapshot cuts and applied-but-unreported updates are dropped; requests
  // of older generations get ABORTED; chunks created later are in the new
  // generation. Errors (no chunk's state changed, though chunks the
  // snapshot holds and the shard lacked are created first):
  // FAILED_PRECONDITION for a generation not newer, DATA_LOSS for a
  // snapshot that lacks a chunk this shard holds or does not match it.
  absl::Status RollBack(uint64_t generation, int64_t step,
                        const std::string* metadata, const ChunkTier* records);
  uint64_t generation() const;

  // Wakes every pull waiting at a gate with UNAVAILABLE, now and later
  // (the server is shutting down).
  void Cancel();

  void set_snapshot_sink(SnapshotSink sink);
  void set_applied_sink(AppliedSink sink);
  // Called when a spilled tile cannot be read back, or comes back at
  // another version (the request that met it fails with that DATA_LOSS):
  // the chunk's state is lost here, and only a restart from a snapshot,
  // with the job rolled back to it, can go on consistently.
  using LostStateSink = std::function<void(const absl::Status&)>;
  void set_lost_state_sink(LostStateSink sink);
  const ShardCounters& counters() const { return counters_; }
  // The RAM tier's books; null without a budget.
  const SpillStore* spill() const { return options_.spill.get(); }
  // Blocks until the tier's reads ahead and writes behind queued so far
  // are done (tests, benches).
  void WaitForTierIo();
  void FillStats(v1::StatsResponse* out) const;
  size_t num_chunks() const;

 private:
  struct Group {
    v1::GroupSpec spec;
    OptimizerParams params;
  };
  struct Contribution {
    uint64_t samples = 0;
    uint64_t first_sample = 0;
    uint64_t epoch = 0;  // the view epoch the step was computed in
    std::vector<float> grad;
    bool whole_step = false;  // PushRequest.whole_step: closes the step
    // A deferred push's clipping factor (CommitRequest.scale), applied
    // when the step closes, in the same float multiply Commit would do.
    float scale = 1.0f;
  };
  struct Chunk {
    mutable absl::Mutex mu;
    absl::CondVar changed;
    v1::ChunkSpec spec;            // immutable after creation
    const Group* group = nullptr;  // immutable after creation; owned by groups_
    ChunkRecord rec ABSL_GUARDED_BY(mu);
    // BSP: pushes of the open step (step == rec.version), by member id.
    std::map<uint64_t, Contribution> open ABSL_GUARDED_BY(mu);
    // SSP: each worker's clock on this chunk (steps pushed).
    absl::flat_hash_map<uint64_t, int64_t> clocks ABSL_GUARDED_BY(mu);
    // The rollback generation and the step it started from.
    uint64_t generation ABSL_GUARDED_BY(mu) = 0;
    int64_t generation_step ABSL_GUARDED_BY(mu) = 0;
    // The tier (shard_tier.cc): whether rec's weights and slots are in RAM
    // (written under mu, read without it as a hint), whether the spilled
    // copy equals them, and whether a read-ahead is queued.
    std::atomic<bool> resident{true};
    bool disk_current ABSL_GUARDED_BY(mu) = false;
    std::atomic<bool> prefetching{false};
    // Read ahead and not used since: a later read-ahead does not spill it
    // to make its own room (with a budget of a few tiles, read-aheads would
    // spill each other before their use, and read everything twice).
    std::atomic<bool> read_ahead{false};
    // BSP workers' pulls waiting at the gate for this chunk, until each
    // has copied the weights it answers with: MakeRoom keeps the tile in RAM
    // for them (within SpillStore::pinned_bytes), so a commit's update serves
    // the next step's pulls before its tile is spilled.
    std::atomic<int> pull_waiters{0};
    // When the first worker's pull at each of the last two clocks came
    // (Shard::pull_arrivals_): the order a worker asked for a step's
    // weights in, which a deferred commit of that step follows (BSP
    // workers are at most a step apart, so a slow worker's step is still
    // here after a fast one's next pulls).
    struct PullArrival {
      int64_t clock = -1;
      uint64_t arrival = 0;
    };
    PullArrival step_pulls[2] ABSL_GUARDED_BY(mu);
    size_t tile_bytes = 0;  // immutable after creation
  };
  struct ViewState {
    uint64_t epoch = 0;
    uint64_t workers_epoch = 0;     // when the set of live workers last changed
    std::vector<uint64_t> workers;  // sorted
    absl::flat_hash_map<uint64_t, uint64_t>
        joined_epoch;  // worker -> epoch it joined at
  };

  absl::StatusOr<Chunk*> FindChunk(uint64_t id) const;
  // ABORTED unless `generation` is the chunk's.
  absl::Status CheckGeneration(const Chunk& c, uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Waits up to view_wait for the shard to reach `generation`; UNAVAILABLE
  // if it does not (or the shard is cancelled).
  absl::Status AwaitGeneration(uint64_t generation);
  absl::Status CheckMember(const v1::PushRequest& req);
  absl::Status AwaitWorkerLocked(uint64_t member, uint64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(view_mu_);
  // A checked push: held (deferred) or handled by the consistency gate.
  absl::StatusOr<v1::PushResponse> Hold(Chunk& c, const v1::PushRequest& req,
                                        std::vector<float> grad);
  // `scale`: the factor a commit clips the gradient by (1: none).
  absl::StatusOr<v1::PushResponse> Apply(Chunk& c, const v1::PushRequest& req,
                                         std::vector<float> grad,
                                         float scale = 1.0f);
  // Pull's gate wait and copy, on a found chunk.
  absl::StatusOr<PullResult> PullChunk(Chunk* c, const v1::PullRequest& req,
                                       PayloadAllocator alloc);
  // Drops the deferred pushes of members `live` says have left.
  void DropDeferred(absl::FunctionRef<bool(uint64_t member)> live);
  absl::Status DecodeGradient(const v1::PushRequest& req, size_t payload_bytes,
                              PayloadReader read, uint64_t numel,
                              std::vector<float>* out, bool* nonfinite);
  // Gradient buffers are reused: a fresh multi-MiB allocation per push costs
  // page faults that halve throughput.
  std::vector<float> TakeBuffer(size_t n);
  void GiveBuffer(std::vector<float> buffer);
  absl::StatusOr<v1::PushResponse> PushBsp(Chunk& c, const v1::PushRequest& req,
                                           std::vector<float> grad,
                                           float scale);
  // Applies `grad` times `scale` at once (SSP, ASP).
  absl::StatusOr<v1::PushResponse> PushAsync(Chunk& c,
                                             const v1::PushRequest& req,
                                             const std::vector<float>& grad,
                                             float scale);
  // Closes the open BSP step of `c` if every live worker contributed,
  // reading its tile first if it is spilled: that read's error leaves the
  // step open (and is lost state: set_lost_state_sink).
  absl::Status MaybeCloseStep(Chunk& c, const ViewState& view)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // One optimizer update of `c`, whose gradient `form(begin, end, out)`
  // writes block by block as the update reaches it (ApplyUpdateFormed):
  // what forms the gradient from the pushes reads them once and makes no
  // pass over memory of its own.
  void ApplyGradient(
      Chunk& c, int64_t step,
      absl::FunctionRef<void(size_t begin, size_t end, float* out)> form)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // The same with the gradient ready in `grad`.
  void ApplyGradient(Chunk& c, int64_t step, const float* grad)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Counts an update of `c` done.
  void Applied(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Counts a tiling error if the open pushes of `c` do not cover one
  // contiguous run of samples.
  void CheckTiling(const Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Notes the arrival of a worker's first pull at `clock` in
  // c.step_pulls (the last two clocks).
  void NotePullOfStep(Chunk& c, int64_t clock, uint64_t arrival)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  int64_t MinClock(const Chunk& c, const ViewState& view) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  void CaptureForSnapshot(const Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Notes that chunk `c` applied (step, worker) for the ledger.
  void NoteApplied(const Chunk& c, int64_t step, uint64_t worker,
                   uint64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  ViewState view() const;
  static bool IsLive(const ViewState& view, uint64_t member);
  // A new chunk from `restored`, or from its init (reading init files
  // through `files`, if given).
  absl::Status CreateChunk(const v1::ChunkSpec& spec, const Group* group,
                           const ChunkRecord* restored,
                           InitFiles* files = nullptr);
  // The tier (shard_tier.cc). Resident makes c's tile resident (reading it
  // back if spilled) and counts the use; DATA_LOSS if it cannot be read.
  absl::Status Resident(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Tells the lost-state sink about `why` (a tile read failed); returns it.
  absl::Status LostState(absl::Status why) const;
  // The weights a pull of c answers with: the resident tile's, or, for a
  // spilled tile, its weights read alone into `scratch` (the tile stays on
  // disk). Counts the use; DATA_LOSS if they cannot be read.
  absl::StatusOr<const float*> WeightsToPull(Chunk& c, ChunkRecord* scratch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Before locking c for a use: room for its tile if it is spilled.
  void BeforeUse(const Chunk& c);
  // After a use, no lock held: reads ahead the tiles expected next, spills
  // while the budget is passed, and starts a write-behind.
  void AfterUse(const Chunk& c);
  // Writes out the changed tiles among the next to be spilled (the first
  // of SpillStore::Victims, the spill options' write_behind_bytes of them),
  // keeping them resident: on the writer thread.
  void WriteBehind();
  // Spills tiles in SpillStore::Victims order until `extra` more bytes fit;
  // whether they do. With `for_read_ahead`, tiles read ahead and not yet used
  // stay. Tiles pulls wait on stay too, up to SpillStore::pinned_bytes of
  // them, their bytes let past the budget.
  bool MakeRoom(size_t extra, bool for_read_ahead = false);
  // A pull that waited on c is done with it (no lock held): the last one
  // makes room, on the I/O threads, if c's tile was kept past the budget.
  void Unpin(Chunk& c);
  // Runs `task` on `pool`, counted in tier_tasks_ (WaitForTierIo).
  void ScheduleTierTask(ThreadPool& pool, std::function<void()> task);
  // Writes c's tile out (unless the spilled copy is current) and frees it.
  absl::Status Spill(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Reads c's spilled tile into `rec` (at c's version: rec->version);
  // DATA_LOSS if it cannot be read or does not fit (callers decide whether
  // that is lost state).
  absl::Status ReadTileInto(const Chunk& c, ChunkRecord* rec) const;
  // A spilled chunk's record as it would be resident (for captures).
  absl::StatusOr<ChunkRecord> TileCopy(const Chunk& c) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Marks c's resident tile changed since it was last written out.
  static void Dirty(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
    c.disk_current = false;
  }
  // A chunk spec's own checks (name, id, size, shape, overflow).
  static absl::Status ValidateChunkSpec(const v1::ChunkSpec& s,
                                        uint64_t max_chunk_bytes);
  // Restore's parts: the optimizer groups of snapshot metadata, and one
  // snapshot record as a new chunk (nothing for a chunk already held).
  absl::Status RegisterGroups(const std::string& metadata);
  absl::Status RestoreChunk(const ChunkRecord& rec);

  const ShardOptions options_;
  ShardCounters counters_;
  // Deferred pushes waiting for their Commit (shard_deferred.cc): by member,
  // then chunk id.
  struct Deferred {
    v1::PushRequest req;  // without payload
    std::vector<float> grad;
    uint64_t arrival = 0;  // when the push came
    // When the chunk's first pull of the push's step came
    // (Chunk::step_pulls; 0: none known).
    uint64_t pulled = 0;
  };
  absl::Mutex deferred_mu_;
  uint64_t deferred_arrivals_ ABSL_GUARDED_BY(deferred_mu_) = 0;
  absl::flat_hash_map<uint64_t, absl::flat_hash_map<uint64_t, Deferred>>
      deferred_ ABSL_GUARDED_BY(deferred_mu_);
  // Each member's last commit and its answer, given again to a retry.
  struct LastCommit {
    int64_t step = -1;
    uint32_t pushes = 0;
    absl::StatusOr<v1::CommitResponse> result;
  };
  absl::flat_hash_map<uint64_t, LastCommit> last_commit_
      ABSL_GUARDED_BY(deferred_mu_);
  // Members whose latest commit failed here, and its step: that step cannot
  // close until they redo it, so their pulls waiting for it are answered
  // ABORTED at once (a worker pulls while its commit is still applying).
  // Cleared by their next deferred push or a successful commit. A leaf
  // lock: taken under a chunk's, and under deferred_mu_.
  absl::Mutex commit_failed_mu_;
  absl::flat_hash_map<uint64_t, int64_t> commit_failed_
      ABSL_GUARDED_BY(commit_failed_mu_);
  bool CommitFailed(uint64_t member, int64_t step);
  absl::StatusOr<v1::CommitResponse> ApplyCommit(const v1::CommitRequest& req);
  // Wakes every pull waiting at a gate to look again.
  void WakeWaiters();
  std::atomic<size_t> num_chunks_{0};
  // The generation of the latest RollBack and its step, set before it
  // moves the chunks (CreateChunk gives new chunks these).
  std::atomic<uint64_t> rolled_generation_{0};
  std::atomic<int64_t> rolled_step_{0};
  // The generation of the last RollBack once every chunk is in it: read
  // without a lock by every push and pull, written under view_mu_ (whose
  // view_changed_ wakes the requests waiting for it).
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> cancelled_{false};

  mutable absl::Mutex table_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Group>> groups_
      ABSL_GUARDED_BY(table_mu_);
  absl::flat_hash_map<uint64_t, std::unique_ptr<Chunk>> chunks_
      ABSL_GUARDED_BY(table_mu_);
  // tensor name -> shape, to refuse one name registered with two shapes.
  absl::flat_hash_map<std::string, std::vector<int64_t>> tensor_shapes_
      ABSL_GUARDED_BY(table_mu_);

  absl::Mutex update_mu_;  // serializes UpdateView
  mutable absl::Mutex view_mu_;
  absl::CondVar view_changed_;
  ViewState view_ ABSL_GUARDED_BY(view_mu_);

  // Gradient buffers for reuse, by capacity (TakeBuffer takes the smallest
  // that fits and is at most twice the size asked for). Every buffer the shard
  // has given out comes back here, except with a spill store, which keeps at
  // most kSpillPoolBuffers: there memory kept is memory over the budget.
  // Freeing them instead costs the next step fresh pages: a deferred step holds
  // a buffer per chunk at once, and memory glibc unmaps between steps (a thread
  // arena's heap that became free) came back with a page fault and a zeroing
  // for every 4 KiB, measured at about half the servers' CPU in a 124M step
  // (docs/BENCHMARKS.md).
  static constexpr size_t kSpillPoolBuffers = 64;
  absl::Mutex pool_mu_;
  std::multimap<size_t, std::vector<float>> pool_ ABSL_GUARDED_BY(pool_mu_);

  // Pulls waiting at the gate, by requester (0: every non-worker).
  absl::Mutex waiting_mu_;
  absl::flat_hash_map<uint64_t, int> waiting_ ABSL_GUARDED_BY(waiting_mu_);

  absl::Mutex snap_mu_;
  SnapshotSink snapshot_sink_ ABSL_GUARDED_BY(snap_mu_);
  // step -> captured chunks so far (BSP auto-snapshots).
  std::map<int64_t, std::unique_ptr<ChunkTier>> pending_snapshots_
      ABSL_GUARDED_BY(snap_mu_);
  int64_t last_captured_step_ ABSL_GUARDED_BY(snap_mu_) = -1;

  AppliedTracker applied_;
  absl::Mutex applied_sink_mu_;
  AppliedSink applied_sink_ ABSL_GUARDED_BY(applied_sink_mu_);
  mutable absl::Mutex lost_state_mu_;
  LostStateSink lost_state_sink_ ABSL_GUARDED_BY(lost_state_mu_);

  absl::Mutex tier_tasks_mu_;
  // Read-aheads, write-behinds and Unpin's MakeRoom queued or running.
  int tier_tasks_ ABSL_GUARDED_BY(tier_tasks_mu_) = 0;
  std::atomic<bool> writing_behind_{false};  // one write-behind at a time
  std::atomic<bool> unpinning_{false};       // one Unpin's MakeRoom at a time
  std::atomic<uint64_t> pull_arrivals_{0};   // pulls so far (Chunk::step_pulls)
  // The tier's threads: reads ahead, and writes behind on a thread of its
  // own, so a write never holds up a read. Declared last, so they are
  // joined first, while the chunks and counters their tasks use still
  // exist. Null without a tier.
  std::unique_ptr<ThreadPool> tier_io_;
  std::unique_ptr<ThreadPool> tier_writer_;
};

}  // namespace strata

#endif  // STRATA_SERVER_SHARD_H_
