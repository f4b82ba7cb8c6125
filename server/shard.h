// The state of one parameter-server shard: its chunks (weights, optimizer
// state, version), the job's consistency gate, and the update rule. It knows
// nothing of gRPC; server/parameter_server.cc adapts it to the wire. Its
// settings, counters and callback types are in server/shard_options.h.
//
// A Shard composes parts, each with a header of its own:
//  - server/chunk_table.h: the chunks and optimizer groups, registration;
//  - server/consistency_gate.h: when a push is applied and how long a pull
//    waits, one class per consistency (bsp_gate.h, async_gate.h);
//  - server/deferred_commits.h: pushes held until their Commit;
//  - server/tile_cache.h: the RAM tier (tiles resident or spilled);
//  - server/snapshot_capture.h: BSP auto-snapshots' consistent cuts;
//  - server/shard_membership.h: the view of live workers, the rollback
//    generation;
//  - server/gradient_pool.h, server/wait_quota.h, server/applied_tracker.h.
// What joins them is here: shard.cc (registration, push, commit, views),
// shard_pull.cc (the pull's wait), shard_rollback.cc (captures, restores
// and rollbacks), shard_transfer.cc (a joining replica's state).
//
// Rollbacks (BSP; View.generation): RollBack puts every chunk back to a
// snapshot's state (or the initial weights for step 0) in a new generation.
// Pushes and pulls carry the generation they were computed in: an older
// one than the chunk's is ABORTED (checked under the chunk's lock, so
// nothing computed before the rollback is applied after it), a newer one
// waits up to view_wait for this shard to roll back (then UNAVAILABLE).
#ifndef STRATA_SERVER_SHARD_H_
#define STRATA_SERVER_SHARD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/shard_options.h"
#include "storage/chunk_tier.h"
#include "storage/spill_store.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/ps.pb.h"

namespace strata {

struct Chunk;
struct ShardView;
class InitFiles;

// Thread-safe. Each chunk has its own lock, so pushes and pulls of different
// chunks run in parallel; the view and the chunk table have one lock each.
class Shard {
 public:
  explicit Shard(ShardOptions options);
  ~Shard();

  // ps.proto Reduce: a BSP step's sums over whole tensors
  // (server/shard_reduce.cc). Reduction 0 waits up to max_wait for each
  // chunk's step to close (DEADLINE_EXCEEDED; ABORTED when the live
  // workers changed since the request's epoch and the step is redone).
  absl::StatusOr<v1::ReduceResponse> Reduce(const v1::ReduceRequest& req);

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
  // req.dtype() to space from `alloc` (called once, under the chunk's lock);
  // for ONEBIT or TOPK, a live worker's, a delta against its copy or the
  // whole weights (server/pull_mirrors.h), as the result says. A gate
  // wait ends max_wait after `wait_from` (unset: the call): the pulls of
  // one batch share one max_wait, counted from the batch's start.
  absl::StatusOr<PullResult> Pull(
      const v1::PullRequest& req, PayloadAllocator alloc,
      std::optional<absl::Time> wait_from = std::nullopt);
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

  // A joining replica's catch-up (server/replica_catch_up.h).
  // ExportState sends this shard's whole state through `emit`: a header
  // (`from_member` is this server's member id), then every chunk, each
  // copied under its own lock; the caller keeps every change out
  // meanwhile. Each part stays within one chunk's gradient in size (a
  // record goes in pieces). *bytes: the chunks' encoded records.
  using StateEmitter = absl::FunctionRef<absl::Status(v1::ShardStatePart&)>;
  absl::Status ExportState(uint64_t from_member, StateEmitter emit,
                           uint64_t* bytes);
  // Replaces this shard's state with the one `header` begins and `next`
  // yields part by part (false at the end; ps.proto ShardStatePart), then
  // lets go what the workers this shard's view does not list held (its
  // view may be newer than the sender's). UNAVAILABLE, with nothing
  // changed, while this shard's view is older than the sender's;
  // FAILED_PRECONDITION, with nothing changed, if this shard holds a chunk
  // the header does not list; INVALID_ARGUMENT or DATA_LOSS for parts out
  // of order, a record that is corrupt, unlisted, sent twice or does not
  // match its spec, a gradient of another size than its chunk's, or a
  // listed chunk that never came (the state is then part installed: the
  // server must not serve). Returns the number of chunks installed.
  using PartReader =
      absl::FunctionRef<absl::StatusOr<bool>(v1::ShardStatePart* part)>;
  absl::StatusOr<uint64_t> InstallState(const v1::ShardStateHeader& header,
                                        PartReader next);

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
  // Called when the spill disk fails a write with an I/O error (not a full
  // disk): the state is whole, in RAM, but the disk is failing.
  void set_disk_error_sink(LostStateSink sink);
  const ShardCounters& counters() const { return counters_; }
  // The RAM tier's books; null without a budget.
  const SpillStore* spill() const { return options_.spill.get(); }
  // Blocks until the tier's reads ahead and writes behind queued so far
  // are done (tests, benches).
  void WaitForTierIo();
  void FillStats(v1::StatsResponse* out) const;
  size_t num_chunks() const;
  // Chunk `id`'s number of values; NOT_FOUND for a chunk not held.
  absl::StatusOr<uint64_t> ChunkNumel(uint64_t id) const;

 private:
  struct Parts;

  // Holds a checked deferred push until its Commit.
  absl::StatusOr<v1::PushResponse> Hold(Chunk& c, const v1::PushRequest& req,
                                        std::vector<float> grad);
  // Pull's wait at the gate and copy, on a found chunk.
  absl::StatusOr<PullResult> PullChunk(Chunk& c, const v1::PullRequest& req,
                                       PayloadAllocator alloc,
                                       std::optional<absl::Time> wait_from);
  // REQUIRES: c.mu held. Waits until the gate lets the pull through
  // (`need`: the version PullTarget said) or max_wait after `wait_from`
  // (unset: after the wait begins), then copies the weights out; sets
  // *pinned once it pins the tile.
  absl::StatusOr<PullResult> ServeAtGate(Chunk& c, const v1::PullRequest& req,
                                         bool worker, uint64_t need,
                                         PayloadAllocator alloc,
                                         std::optional<absl::Time> wait_from,
                                         bool* pinned);
  // REQUIRES: c.mu held. Writes c's weights in req.dtype() (or a compressed
  // pull's answer) to `alloc`'s space.
  absl::StatusOr<PullResult> CopyOut(Chunk& c, const v1::PullRequest& req,
                                     PayloadAllocator alloc);
  // Copies the payload of a push into a pooled buffer, checking each block
  // is finite as it goes (`nonfinite` says that was the error).
  absl::Status DecodeGradient(const v1::PushRequest& req, size_t payload_bytes,
                              PayloadReader read, uint64_t numel,
                              std::vector<float>* out, bool* nonfinite);
  // A zero push (PushRequest.zero): INVALID_ARGUMENT if it carries a
  // payload or is a whole-step push; counted.
  absl::Status CheckZeroPush(const v1::PushRequest& req, size_t payload_bytes);
  // The same for a compressed push (ONEBIT, TOPK: common/compress.h): read
  // whole (at most its chunk's bound), decoded into a pooled buffer.
  absl::Status DecodeCompressed(const v1::PushRequest& req,
                                size_t payload_bytes, PayloadReader read,
                                uint64_t numel, std::vector<float>* out,
                                bool* nonfinite);
  // OK for a push from a live worker whose epoch the gate accepts.
  absl::Status CheckMember(const v1::PushRequest& req);
  // Wakes every pull waiting at a gate to look again.
  void WakeWaiters();
  // RollBack's parts: the check of every record before any chunk moves
  // (creating the chunks the shard lacks), and one chunk's move into the
  // new generation.
  absl::Status CheckRollBack(int64_t step, const std::string* metadata,
                             const ChunkTier* records,
                             std::vector<uint64_t>* ids, InitFiles* files);
  void ResetChunk(Chunk& c, uint64_t generation, int64_t step, ChunkRecord* rec,
                  bool init, InitFiles* files);
  // Lets go what the workers the view does not list held up or counted
  // on (UpdateView's work once it published a newer view).
  void Sweep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_);
  // A switch of the job's consistency to `to` with the view `next`: every
  // chunk taken over by `to`'s gate (ConsistencyGate::Adopt), then that
  // gate made the current one.
  void AdoptChunks(const ShardView& next, const Consistency& to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_);
  // InstallState's part for one chunk.
  struct ChunkInstall;
  absl::Status InstallChunk(ChunkInstall& chunk,
                            const absl::flat_hash_set<uint64_t>& listed,
                            const absl::flat_hash_set<uint64_t>& held_before,
                            absl::flat_hash_set<uint64_t>& seen,
                            uint64_t* max_version);
  // Sends one chunk's parts (ExportState).
  absl::Status ExportChunk(Chunk& c, StateEmitter emit, uint64_t* bytes);

  const ShardOptions options_;
  ShardCounters counters_;
  absl::Mutex update_mu_;  // one UpdateView or RollBack at a time
  std::unique_ptr<Parts> p_;
};

}  // namespace strata

#endif  // STRATA_SERVER_SHARD_H_
