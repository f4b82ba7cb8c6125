// The C++ client of the parameter servers: registers a model's tensors, cuts
// them into chunks, finds each chunk's server from the scheduler's view, and
// pushes gradients and pulls weights asynchronously, with a priority per
// chunk and retries on UNAVAILABLE.
//
// Ordering: each server has a queue ordered by priority (higher first, then
// submission order) and at most `max_in_flight_per_server` calls on the
// wire, so a trainer that gives its last layers the highest push priority
// and its first layers the highest pull priority gets them through first.
#ifndef STRATA_CLIENT_PS_CLIENT_H_
#define STRATA_CLIENT_PS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chunk_plan.h"
#include "security/tls.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/ps.pb.h"
#include "transport/wire_kind.h"

namespace strata {

class SchedulerClient;
class ShmRegion;

struct PsClientOptions {
  int max_in_flight_per_server = 4;
  // Ops whose fp32 payload is under batch_max_bytes, ops of up to 4 MiB
  // whose payload goes in place in the tensor region (ShareTensors, its
  // server holding it: the payload adds nothing to the message), and
  // uncompressed pushes of zeros of any size share calls (PushBatch,
  // PullBatch)
  // when more of them wait for a server than it has calls free: the ops
  // at the queue's head that may go together (pushes with pushes, pulls
  // with pulls) are spread over the free calls, at most
  // batch_max_requests and 4 MiB of payload a call. Each op keeps its own
  // request, answer and retry; its payload goes in place in the tensor
  // region (ShareTensors) or in the message, not in a shared-memory slot
  // (a link has one per call), though in the dtype a slot would carry
  // (fp32 with *_fp32_through_shm). A call costs tens of microseconds of
  // processor time at each end, more than the bytes of a small chunk
  // (norms, biases, experts) do (docs/BENCHMARKS.md). 0: every op its own
  // call. Compressed ops, and payloads that could go on the bulk plane,
  // always have their own. A server that answers a batch UNIMPLEMENTED
  // (one from before batches) turns them off for this client.
  uint64_t batch_max_bytes = 64 << 10;
  int batch_max_requests = 256;
  // Deadline of one attempt. Pulls may wait at a server's gate, so this is
  // long; the server's own max_wait answers first.
  absl::Duration rpc_timeout = absl::Seconds(300);
  int max_attempts = 20;  // for UNAVAILABLE only
  absl::Duration initial_backoff = absl::Milliseconds(20);
  absl::Duration max_backoff = absl::Seconds(2);
  // How long RegisterModel waits for every shard slot to have a live server.
  absl::Duration servers_timeout = absl::Seconds(60);
  v1::DType push_dtype = v1::DTYPE_F32;
  v1::DType pull_dtype = v1::DTYPE_F32;
  // Pushes converted to bf16 carry each chunk's rounding error into its
  // next bf16 push (client/error_feedback.h), in the pass that converts
  // them. Once an attempt has sent bf16 bytes with an error carried, a
  // retry sends those bytes again. A push sent as fp32 (through shared
  // memory, push_fp32_through_shm) leaves the chunk's carried error for
  // its next bf16 push: at most one rounding per element, delayed.
  bool push_error_feedback = false;
  // Pushes of steps >= compress_from_step go compressed, with error
  // feedback (client/error_feedback.h CompressedErrorFeedback):
  // DTYPE_ONEBIT (signs and a bf16 scale per 64 elements) or DTYPE_TOPK (the
  // largest topk_ratio of each chunk's elements); DTYPE_UNSPECIFIED: off.
  // Wherever the payload goes (shared memory, messages; ONEBIT also on
  // the bulk plane: TOPK's size varies, so it goes in messages there),
  // and whatever push_dtype says; not a push whose StepStamp sets a dtype
  // (all-reduce's whole-step pushes).
  v1::DType push_compress = v1::DTYPE_UNSPECIFIED;
  double topk_ratio = 0.01;
  int64_t compress_from_step = 0;
  // TOPK only: DGC's momentum correction with this momentum (0: none): the
  // client keeps each chunk's momentum and pushes it compressed
  // (CompressedErrorFeedback), for servers that apply pushes without one.
  double topk_momentum = 0;
  // Pulls at clocks >= compress_from_step come compressed the same way
  // (DTYPE_ONEBIT, or DTYPE_TOPK at topk_ratio): each a delta of the
  // weights against the copy this client keeps of the chunk, what the
  // encoding left out kept by the server for the next one
  // (server/pull_mirrors.h); the pull of the step before (where there is
  // one), and any after a restart on either side, is the whole weights in
  // fp32, where the copies start. In messages only, whatever
  // pull_dtype, shared_memory and wire say. REQUIRES: pulls of one chunk
  // do not overlap. DTYPE_UNSPECIFIED: off.
  v1::DType pull_compress = v1::DTYPE_UNSPECIFIED;
  // A push_dtype (pull_dtype) of bf16 applies to payloads in messages
  // only; through shared memory they stay fp32 (StepStamp::dtype overrides
  // this). On a 2-core host the conversion cost more there than the bytes
  // it saved (docs/BENCHMARKS.md); over a network link the bytes count.
  bool push_fp32_through_shm = false;
  bool pull_fp32_through_shm = false;
  // Carry payloads through shared memory to each server on this host that
  // can map it (client/shm_link.h), up to this many bytes per server; the
  // others get them in messages. Same requests, same answers.
  bool shared_memory = true;
  uint64_t shm_bytes_per_server = 1ull << 30;
  // How long the client tries to have a server detach a tensor-region
  // session (ShareTensors) that an attempt without an answer named, while
  // the ops that used it wait, before it gives up on that server's fence.
  // A server refusing connections for 5 s counts as gone (detached).
  absl::Duration shm_detach_timeout = absl::Seconds(60);
  // TLS credentials for the channels to servers (security/tls.h).
  std::shared_ptr<const Security> security = Security::Plaintext();
  // How payloads of at least bulk_min_bytes travel to the servers that
  // shared memory does not reach (transport/wire_kind.h): kUcx and kAuto
  // move them over the bulk plane (client/bulk_link.h) where the server
  // offers it; kUcx makes RegisterModel fail where one does not. Under
  // mutual TLS its payloads are sealed (transport/bulk_cipher.h) unless
  // bulk_insecure; a server that does not seal them is then refused.
  // kGrpc is the default (docs/ARCHITECTURE.md says why). A pull on the
  // plane receives fp32 weights straight into `dst`: one whose attempt
  // failed after the server began to send may have written them there
  // (the chunk's weights then, as a late pull into the tensor region
  // may).
  WireKind wire = WireKind::kGrpc;
  bool bulk_insecure = false;
  uint64_t bulk_min_bytes = 64 << 10;
  std::string ucx_transports;  // UcxNode::Options::transports
};

namespace ps_client_internal {
struct OpState;  // one op's state, shared by its handles (ps_client_impl.h)
}  // namespace ps_client_internal

// The outcome of one asynchronous push or pull. Copyable; all copies share
// one state. Thread-safe.
class OpHandle {
 public:
  OpHandle() = default;
  // Blocks until the operation finished; its final status.
  absl::Status Wait() const;
  bool done() const;
  // After Wait(): the chunk version the server reported.
  uint64_t version() const;
  // After Wait() of a pull: the smallest worker clock the server's gate knew.
  int64_t min_clock() const;

 private:
  friend class PsClient;  // makes them
  explicit OpHandle(std::shared_ptr<ps_client_internal::OpState> s)
      : state_(std::move(s)) {}
  std::shared_ptr<ps_client_internal::OpState> state_;
};

// What a worker stamps on its pushes and pulls besides the step (ps.proto:
// fencing and the BSP audit).
struct StepStamp {
  // Pushes: the view epoch the step was computed in; pulls: the epoch the
  // requester computed its previous step in. 0: the client's current view
  // when the request is sent (and no check on pulls).
  uint64_t epoch = 0;
  // Pushes: the global index of the first of the samples behind the
  // gradient (a contiguous run).
  uint64_t first_sample = 0;
  // The rollback generation (View.generation) the step was computed in;
  // unset: the client's current view's when the request is sent. A worker
  // sets it, so nothing it computed before a rollback is applied after.
  std::optional<uint64_t> generation;
  // Pushes: the server holds the gradient until Commit(step, scale) (ps.proto
  // PushRequest.deferred).
  bool deferred = false;
  // Pushes (all-reduce sync): the gradient is the whole step's, reduced
  // among the workers (ps.proto PushRequest.whole_step).
  bool whole_step = false;
  // PushTensorAsync: only the tensor's chunks whose global index is
  // share_index modulo share_stride (each member of an all-reduce group
  // pushes its share of the chunks).
  int share_stride = 1;
  int share_index = 0;
  // Pushes: the gradient is zero (an MoE expert no token of the step was
  // routed to): the request goes without a payload (ps.proto
  // PushRequest.zero) and `grad` is not read (it may be null). Nothing is
  // compressed or carried for error feedback: a chunk's carried error
  // waits for its next push with a payload.
  bool zero = false;
  // Pushes (SSP/ASP): the factor on the push's learning rate (ps.proto
  // PushRequest.async_lr_scale; 0: none).
  float async_lr_scale = 0;
  // The payload's type on the wire; unset: the client's push_dtype or
  // pull_dtype (a worker that pulls bf16 to compute reads the final weights
  // in fp32).
  std::optional<v1::DType> dtype;
};

// Waits for every op; the first error among them, or OK.
absl::Status WaitAll(const std::vector<OpHandle>& ops);

// A model as the servers hold it: its tensors, optimizer groups, and how
// each tensor starts.
struct ModelSpec {
  std::vector<TensorSpec> tensors;
  std::vector<v1::InitSpec> inits;  // one per tensor (missing: zeros)
  std::vector<v1::GroupSpec> groups;
  uint64_t chunk_bytes = kDefaultChunkBytes;
};

// Thread-safe.
class PsClient {
 public:
  // `scheduler` supplies the member id and the view (shard map, epoch); it
  // is not owned and must outlive the client.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      PsClientOptions options, SchedulerClient* scheduler);
  ~PsClient();  // waits for operations in flight

  // Cuts the model into chunks, places them on the shard slots of the view
  // (waiting up to servers_timeout for every slot to have a server) and
  // declares each server's chunks to it. Idempotent across workers; a
  // second call declares the first call's plan again.
  absl::Status RegisterModel(const ModelSpec& model);
  // Declares the model of the first RegisterModel call again, as it was
  // (after a rollback, for a restarted server that lacks the chunks):
  // nothing it named, such as an --init_from file, is read again.
  // FAILED_PRECONDITION if RegisterModel was never called.
  absl::Status RegisterModelAgain();
  // REQUIRES: RegisterModel succeeded.
  const ChunkPlan& plan() const;

  // Pushes the gradient of chunk `chunk` (an index into plan().chunks) for
  // `step`, the mean over `samples` samples. `grad` holds that chunk's numel
  // floats; it must stay valid and unchanged until the handle is done.
  OpHandle Push(int chunk, const float* grad, int64_t step, uint64_t samples,
                int priority = 0, StepStamp stamp = {});
  // Pulls chunk `chunk` into `dst` (numel floats; written only on success,
  // before the handle completes; must stay valid until then). `clock` is the
  // step the caller is about to compute (-1: not a worker step, no gate).
  OpHandle Pull(int chunk, float* dst, int64_t clock, uint64_t min_version,
                int priority = 0, StepStamp stamp = {});

  // Whole tensors (`tensor` indexes ModelSpec::tensors): Push or Pull of
  // every chunk of the tensor, with the same arguments; `grad` and `dst`
  // point at the tensor's first element, and the client finds each chunk's
  // place in it. One handle per chunk, in order; one failed handle
  // (INVALID_ARGUMENT) for an index outside the model.
  std::vector<OpHandle> PushTensorAsync(int tensor, const float* grad,
                                        int64_t step, uint64_t samples,
                                        int priority = 0, StepStamp stamp = {});
  std::vector<OpHandle> PullTensorAsync(int tensor, float* dst, int64_t clock,
                                        uint64_t min_version, int priority = 0,
                                        StepStamp stamp = {});
  // As above, waiting for every chunk: the first error, or OK.
  absl::Status PushTensor(int tensor, const float* grad, int64_t step,
                          uint64_t samples, int priority = 0);
  absl::Status PullTensor(int tensor, float* dst, int64_t clock,
                          uint64_t min_version, int priority = 0);

  // Applies this client's deferred pushes of `step` on every server that
  // got some, each scaled by `scale` in (0, 1] first (ps.proto Commit), in
  // parallel across servers; retried on UNAVAILABLE (a repeat gets the
  // first answer). REQUIRES: those pushes have completed. The first error;
  // ABORTED when a server lost some (it restarted, or this worker left the
  // view).
  absl::Status Commit(int64_t step, float scale);
  // Forgets the deferred pushes counted for `step` and later ones (an
  // attempt that failed before its Commit): a redo counts its own. An
  // earlier step's counts stay: its Commit may be in flight meanwhile
  // (the trainer computes a step while the previous one commits).
  void ForgetDeferred(int64_t step);
  // Drops the rounding errors carried for bf16 pushes (push_error_feedback):
  // the pushes they came from were not applied. REQUIRES: no push in
  // flight.
  void ForgetPushErrors();

  // Under BSP, with LAMB or Adafactor: drives the sums over whole tensors
  // that the update of `step` needs for every tensor cut into several
  // chunks (ps.proto Reduce), until each such chunk applied it. A worker
  // calls it once its pushes of the step (and their Commit) are in; every
  // worker may (each phase is computed once on the servers). Reduction 0
  // waits at the servers for the step to close. OK at once when no tensor
  // needs it (needs_reduce). Retried on UNAVAILABLE; the first other
  // error.
  absl::Status ReduceStep(int64_t step, StepStamp stamp = {});
  // Whether the model has a tensor whose BSP updates wait for ReduceStep.
  bool needs_reduce() const;

  // Tells the client that the payload bytes of `region` (past its header)
  // hold the caller's tensors (a model's weights and gradients). Each
  // server on this host maps the region too (when it can; shared_memory
  // must be on), and an fp32 pull into it or push from it names its place
  // there: the server writes the weights in place and copies the gradient
  // out of it, with no copy through a slot on this side. Other buffers,
  // other hosts and bf16 payloads go as before. Unlike the contracts of
  // Push and Pull above, a pull into the region whose answer was lost may
  // already have written its destination. An op one of whose attempts got
  // no answer completes only once that server has detached the session
  // the attempt named (DetachShm), so it no longer touches the region;
  // the region is then attached anew. Where the server cannot detach it
  // (no DetachShm, or no answer within shm_detach_timeout) the op
  // completes anyway, the client stops using the region with that server,
  // and a late access stays possible: a pull writes the chunk's current
  // weights, never older than a later pull wrote (under BSP the same
  // bytes until the caller pushes its step), and a push read late never
  // replaces its retry or a later push (PushRequest.push_seq).
  // Called once, before the first push or pull; `region` must outlive
  // every op on it.
  void ShareTensors(std::shared_ptr<ShmRegion> region);
  // Server-side stats of every slot.
  absl::StatusOr<std::vector<v1::StatsResponse>> Stats();
  // The path an uncompressed payload to each slot's server takes now:
  // the tensor region (for buffers in it), a shared-memory slot, the bulk
  // plane (where some chunk of the slot reaches bulk_min_bytes) or a
  // message. A slot without a live server, or not reached yet, counts as
  // messages.
  v1::WirePaths WirePaths();
  // Asks every server to snapshot at `step`.
  absl::Status SnapshotAll(int64_t step);

 private:
  class Impl;
  class Attempt;
  class BatchAttempt;
  explicit PsClient(std::unique_ptr<Impl> impl);
  // A new op on `chunk`; INVALID_ARGUMENT for an index outside the model.
  absl::StatusOr<std::shared_ptr<ps_client_internal::OpState>> NewOp(
      int kind, int chunk, int priority) const;
  // A push (pull) of `chunk`, not submitted yet: Push's (Pull's)
  // arguments. A deferred push is counted for Commit here.
  absl::StatusOr<std::shared_ptr<ps_client_internal::OpState>> PushOp(
      int chunk, const float* grad, int64_t step, uint64_t samples,
      int priority, StepStamp stamp);
  absl::StatusOr<std::shared_ptr<ps_client_internal::OpState>> PullOp(
      int chunk, float* dst, int64_t clock, uint64_t min_version, int priority,
      StepStamp stamp) const;
  // One op per chunk of `tensor`, op(chunk, offset of the chunk in the
  // tensor) each (a null op: none for that chunk), submitted together;
  // one failed handle for an index outside the model.
  std::vector<OpHandle> PerChunk(
      int tensor,
      absl::FunctionRef<absl::StatusOr<
          std::shared_ptr<ps_client_internal::OpState>>(int, uint64_t)>
          op);
  // The handle of `op`; of an op that failed with `status` before it started.
  static OpHandle Handle(std::shared_ptr<ps_client_internal::OpState> op);
  static OpHandle FailedOp(absl::Status status);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata

#endif  // STRATA_CLIENT_PS_CLIENT_H_
