// PsClient's machinery (ps_client_impl.cc; batches in ps_client_batch.cc;
// the shared-memory payload path in ps_client_shm.cc, the bulk plane's in
// ps_client_bulk.cc, compression in ps_client_compress.cc): one op's
// state, the per-server queues, the attempts on the wire and their
// retries. Private to client/.
#ifndef STRATA_CLIENT_PS_CLIENT_IMPL_H_
#define STRATA_CLIENT_PS_CLIENT_IMPL_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "client/bulk_link.h"
#include "client/error_feedback.h"
#include "client/ps_client.h"
#include "client/pulled_copies.h"
#include "client/shm_link.h"
#include "common/status.h"
#include "common/wire.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/ps.grpc.pb.h"

namespace strata {
namespace ps_client_internal {

// The caller's tensor region as one server holds it (PsClient::
// ShareTensors). Guarded by the client's stub_mu_.
struct TensorSession {
  uint64_t id = 0;  // 0: not attached (yet)
  // Not to be used with this server: it could not map the region, or an
  // attempt in it never got an answer and the server could not be made to
  // detach it (PsClient::Impl::DetachUnanswered).
  bool refused = false;
  // Sessions an attempt named that got no answer: the server may still
  // read or write the region through them until it has detached them
  // (DetachShm). No new session is attached, and no op that used one
  // completes, before then or before the client gives up on the detach
  // (PsClient::Impl::DetachUnanswered).
  struct Undetached {
    uint64_t id = 0;
    // Since when its detaches have failed; have failed with UNAVAILABLE.
    absl::Time failing_since = absl::InfiniteFuture();
    absl::Time unreachable_since = absl::InfiniteFuture();
  };
  std::vector<Undetached> undetached;
};

// One push or pull, across its attempts (one at a time).
struct OpState {
  enum Kind { kPush, kPull } kind;
  int chunk = 0;
  int slot = 0;
  int priority = 0;
  uint64_t seq = 0;  // submission order, ties broken first-come first-served
  int attempts = 0;
  const float* grad = nullptr;
  float* dst = nullptr;
  int64_t step = 0;  // push: step; pull: clock
  uint64_t samples = 0;
  uint64_t min_version = 0;
  StepStamp stamp;
  // A push's payload converted to bf16, when configured: converted once
  // (the first attempt through shared memory converts into its slot and
  // keeps a copy here only when it must be retried); a compressed push's
  // encoding (PsClientOptions::push_compress), made once.
  std::string bf16;
  bool encoded = false;  // the error feedback has run for this push
  v1::DType pull_dtype = v1::DTYPE_F32;  // what the current attempt asked
  // The shared-memory slot the current attempt's payload is in, if any.
  std::shared_ptr<ShmLink> shm;
  ShmLink::Slot shm_slot;
  // The current attempt shares its call with others (PushBatch,
  // PullBatch): its payload goes in place in the tensor region or in the
  // message, not in a shared-memory slot (a link has a few, one per call).
  bool batched = false;
  // The current attempt's payload is in place in the caller's tensor
  // region (PsClient::ShareTensors), in this session of it.
  std::shared_ptr<TensorSession> tensors;
  uint64_t tensors_id = 0;  // the session's id then
  // Set once an attempt in the tensor region got no answer: the op
  // completes only once this session has nothing left undetached.
  std::shared_ptr<TensorSession> fence;
  bool parked = false;  // it waited for the fence once already
  // How the current attempt ended (its trailing metadata): the server's
  // handler answered it; the server did not know its shared-memory session.
  bool answered = false;
  bool shm_lost = false;
  // The current attempt's payload on the bulk plane: the link, and the
  // send (push) or the posted receive (pull), which a pull of bf16
  // weights makes into `bf16`.
  std::shared_ptr<BulkLink> bulk;
  std::unique_ptr<UcxTransfer> transfer;
  bool bulk_payload = false;  // this attempt's answer carries no payload
  // A pull's: its receive and where the weights go; with a sealed
  // session, the sealed bytes (a push's too).
  v1::BulkRef bulk_ref;
  void* bulk_into = nullptr;
  std::string sealed;

  mutable absl::Mutex mu;
  bool finished ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  uint64_t version ABSL_GUARDED_BY(mu) = 0;
  int64_t min_clock ABSL_GUARDED_BY(mu) = 0;

  void Finish(absl::Status s, uint64_t v, int64_t mc) {
    absl::MutexLock lock(&mu);
    status = std::move(s);
    version = v;
    min_clock = mc;
    finished = true;
  }
};

using OpPtr = std::shared_ptr<OpState>;

struct ByPriority {
  bool operator()(const OpPtr& a, const OpPtr& b) const {
    if (a->priority != b->priority) return a->priority < b->priority;
    return a->seq > b->seq;
  }
};

// Sets row_elems of each tensor whose group factors it by rows
// (Adafactor, two or more dimensions): its chunks then hold whole rows.
void AlignRows(const std::vector<v1::GroupSpec>& groups,
               std::vector<TensorSpec>& tensors);
// The tensors of `plan` whose group needs sums over whole tensors (LAMB,
// Adafactor) and that are cut into several chunks.
std::vector<int> SummedTensors(const std::vector<v1::GroupSpec>& groups,
                               const ChunkPlan& plan);

}  // namespace ps_client_internal

namespace ps_client_internal {
// A call on the wire. A gRPC context serves one call, and must outlive
// everything gRPC does with the call; the reactor API allows freeing it in
// OnDone, so each call owns its context and buffers and deletes itself
// there, whoever else still holds its ops.
struct Call : grpc::ClientUnaryReactor {
  grpc::ClientContext ctx;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
};
}  // namespace ps_client_internal

// One attempt of an op on the wire, in a call of its own.
class PsClient::Attempt : public ps_client_internal::Call {
 public:
  Attempt(Impl* client, ps_client_internal::OpPtr op)
      : client_(client), op_(std::move(op)) {}
  void OnDone(const grpc::Status& status) override;

 private:
  Impl* client_;
  ps_client_internal::OpPtr op_;
};

// One PushBatch or PullBatch call: several ops of one server, each in its
// current attempt (PsClientOptions::batch_max_bytes; ps_client_batch.cc).
class PsClient::BatchAttempt : public ps_client_internal::Call {
 public:
  BatchAttempt(Impl* client, std::vector<ps_client_internal::OpPtr> ops)
      : client_(client), ops_(std::move(ops)) {}
  void OnDone(const grpc::Status& status) override;

 private:
  Impl* client_;
  std::vector<ps_client_internal::OpPtr> ops_;
};

class PsClient::Impl {
 public:
  using OpPtr = ps_client_internal::OpPtr;
  using OpState = ps_client_internal::OpState;
  Impl(PsClientOptions options, SchedulerClient* scheduler);
  ~Impl();  // waits for every op and every callback's last access

  absl::Status RegisterModel(const ModelSpec& model);
  // Queues `ops` (each for its chunk's slot), then dispatches the slots
  // they went to; their handles, in order.
  std::vector<OpHandle> Submit(std::vector<OpPtr> ops);
  // The typed stub (control calls) and the generic one (push and pull,
  // whose payloads bypass protobuf's copies) of one server, and the
  // shared-memory link to it when it is on this host.
  struct Stubs {
    std::unique_ptr<v1::ParameterServer::Stub> typed;
    std::unique_ptr<grpc::GenericStub> generic;
    std::shared_ptr<ShmLink> shm;  // guarded by stub_mu_
    bool shm_refused = false;      // the server could not map our region
    // The caller's tensor region at this server.
    std::shared_ptr<ps_client_internal::TensorSession> tensors =
        std::make_shared<ps_client_internal::TensorSession>();
    // The bulk plane to this server (guarded by stub_mu_), or why not.
    std::shared_ptr<BulkLink> bulk;
    bool bulk_refused = false;
    std::string bulk_error;
  };
  absl::StatusOr<Stubs*> StubsForSlot(int slot);
  absl::StatusOr<v1::ParameterServer::Stub*> StubForSlot(int slot) {
    STRATA_ASSIGN_OR_RETURN(Stubs * stubs, StubsForSlot(slot));
    return stubs->typed.get();
  }
  // Called by an attempt when its call ended, then (its very last access to
  // this object) AttemptFinished.
  void OnDone(const OpPtr& op, const grpc::Status& status,
              const grpc::ByteBuffer& response);
  // Called by a batch when its call ended: each op's answer, or the
  // call's error for all of them (`answered`: the server's handler
  // answered the call).
  void OnBatchDone(const std::vector<OpPtr>& ops, const grpc::Status& status,
                   const grpc::ByteBuffer& response, bool answered);
  void AttemptFinished() {
    live_attempts_.fetch_sub(1, std::memory_order_release);
  }

  // How long to wait before the next attempt, after `attempts` attempts:
  // initial_backoff doubling per attempt, up to max_backoff.
  absl::Duration Backoff(int attempts) const;
  // A push's request without its payload or dtype.
  v1::PushRequest PushHeader(const OpState& op, const v1::View& view) const;
  // Whether op's push goes compressed (PsClientOptions::push_compress),
  // or its pull comes compressed (pull_compress; from the step before
  // compress_from_step, whose pull is the whole weights).
  bool Compressed(const OpState& op) const;
  // A compressed push's message: encoded once (kept in op.bf16 for its
  // retries), then through a shared-memory slot, the bulk plane (ONEBIT)
  // or in the message.
  grpc::ByteBuffer CompressedPush(const OpPtr& op, Stubs* stubs,
                                  v1::PushRequest& header);
  // A compressed pull's request fields: the copy it names (none before
  // compress_from_step: the whole weights) and TOPK's ratio.
  void CompressedPullFields(const OpState& op, v1::PullRequest* req);
  // Applies a compressed pull's answer to the chunk's copy and writes the
  // copy to op.dst (PulledCopies::Apply's errors).
  absl::Status ReadCompressedPull(const OpState& op,
                                  const v1::PullResponse& resp,
                                  const PayloadMessage& message);
  // Converts op's gradient to bf16 into out (numel values), with the
  // carried error when push_error_feedback.
  void EncodeBf16(OpState& op, uint16_t* out);
  // Deferred pushes submitted per step and server slot, for Commit.
  void CountDeferred(int64_t step, int slot);
  // The counts of `step` (one per slot), forgetting it and older steps.
  std::vector<uint32_t> TakeDeferred(int64_t step);
  // Forgets the counts of `step` and later steps.
  void ForgetDeferred(int64_t step);
  void ForgetPushErrors() {
    push_errors_.Reset();
    compress_errors_.Reset();
  }
  // PsClient::ReduceStep (ps_client_reduce.cc).
  absl::Status ReduceStep(int64_t step, const StepStamp& stamp);
  // One Reduce to `slot`'s server, retried while retryable.
  absl::StatusOr<v1::ReduceResponse> CallReduce(int slot,
                                                const v1::ReduceRequest& req);
  // PsClient::ShareTensors.
  void ShareTensors(std::shared_ptr<ShmRegion> region);
  // PsClient::WirePaths.
  v1::WirePaths WirePaths();

  PsClientOptions options_;
  SchedulerClient* scheduler_;
  ChunkPlan plan_;
  // Tensors whose BSP updates wait for ReduceStep (set with plan_).
  std::vector<int> summed_tensors_;
  // The model of the first RegisterModel call (RegisterModelAgain).
  std::optional<ModelSpec> model_;
  int num_slots_ = 0;

 private:
  void Dispatch(int slot);
  // Whether `op` may share a call with others (batch_max_bytes), its
  // server holding the tensor region or not (RegionAttached).
  bool Batchable(const OpState& op, bool region_attached) const;
  // Whether the server of `slot` holds this client's tensor region now.
  // Takes stub_mu_: not under mu_.
  bool RegionAttached(int slot);
  // The fp32 bytes of op's payload (0 for a push of zeros).
  uint64_t PayloadBytes(const OpState& op) const;
  // Readies op for a new attempt: counted, last attempt's marks cleared.
  static void BeginAttempt(OpState& op);
  void Issue(const OpPtr& op);
  // One call for `ops`, all of one kind and slot.
  void IssueBatch(std::vector<OpPtr> ops);
  // Ends op's attempt, which ended with `*status` (changed to what the
  // op's caller or its retry should see): gives its payload places back
  // and schedules a retry if it is retryable. Returns whether it will be
  // retried; if not, the caller Completes it (after Dispatch).
  bool EndAttempt(const OpPtr& op, absl::Status* status);
  // The request of one attempt of a push or pull: its payload in the
  // message, in a shared-memory slot, or in place in the tensor region.
  grpc::ByteBuffer PushMessage(const OpPtr& op, Stubs* stubs,
                               const v1::View& view);
  grpc::ByteBuffer PullMessage(const OpPtr& op, Stubs* stubs,
                               const v1::View& view);
  // Attaches a shared-memory link to every slot's server that is on this
  // host and has none yet (blocking RPCs: never on a gRPC callback thread).
  void AttachShm();
  // Attaches the bulk plane to every slot's server that shared memory
  // does not reach and has no link yet (options_.wire; blocking RPCs).
  void AttachBulk() ABSL_EXCLUSIVE_LOCKS_REQUIRED(attach_mu_);
  // Whether every slot has a payload path other than messages, as --wire
  // ucx demands: FAILED_PRECONDITION naming a slot that has not.
  absl::Status CheckWire();
  // Puts the current attempt's payload (`bytes` at `data`; a pull's
  // destination) on the bulk plane, if the server has a link and the
  // payload is large enough; sets `*ref`. Returns whether it did.
  bool TakeBulk(const OpPtr& op, Stubs* stubs, void* data, size_t bytes,
                v1::BulkRef* ref);
  // TakeBulk for a pull of `dtype` weights: fp32 straight into the
  // caller's buffer, bf16 into op->bf16 (ReadResponse converts it).
  bool TakeBulkPull(const OpPtr& op, Stubs* stubs, v1::DType dtype,
                    v1::BulkRef* ref);
  // Ends the attempt's transfer on the bulk plane once its call ended:
  // waits for it where the server answered (it took the payload or sent
  // the weights), aborts it otherwise, and breaks the link where it did
  // not end well. Returns the attempt's status: UNAVAILABLE for a pull
  // answered OK whose weights did not arrive.
  absl::Status EndBulkAttempt(const OpPtr& op, absl::Status status);
  // An attach failed while the server was unreachable: asks the timer
  // thread to try again, at most once a second.
  void WantAttach();
  // The dtype op's payload has in shared memory, sent as `dtype` with
  // `fp32_in_shm` (*_fp32_through_shm): the op's stamp's if it has one,
  // else fp32 for bf16 with fp32_in_shm, else `dtype`.
  static v1::DType DtypeInShm(const OpState& op, v1::DType dtype,
                              bool fp32_in_shm);
  // Whether `bytes` at `place` lie in the tensor region (ShareTensors).
  bool InRegion(const void* place, size_t bytes) const;
  // Whether `bytes` at `place` lie in the tensor region and the server
  // has it attached: then `*ref` names them.
  bool InTensors(const OpPtr& op, Stubs* stubs, const void* place, size_t bytes,
                 v1::ShmRef* ref);
  // Puts the current attempt's payload in a shared-memory slot, if the
  // server has a link with a free one; returns whether it did.
  bool TakeShmSlot(const OpPtr& op, Stubs* stubs, size_t bytes);
  // Where this attempt's payload goes, and as what. `*dtype` is the
  // configured one (op's StepStamp::dtype overrides it); takes a shared
  // slot when one is free, for fp32 when `fp32_in_shm` and the dtype is
  // bf16, and sets `*dtype` to what goes there. Returns whether it took
  // one (else the payload goes in the message as `*dtype`).
  // An fp32 payload whose caller's buffer (`place`) lies in the tensor
  // region goes there instead of a slot (op->tensors).
  // `*ref` names where the payload goes.
  bool TakePayloadPlace(const OpPtr& op, Stubs* stubs, bool fp32_in_shm,
                        const void* place, v1::DType* dtype, v1::ShmRef* ref);
  // Gives the attempt's slot back once the server is done with it; for
  // the tensor region, EndTensorAttempt.
  void EndShmAttempt(const OpPtr& op, const absl::Status& status);
  // Stops using the tensor region's session with a server that may still
  // touch it (no answer: it is to be detached first), or asks to attach it
  // again where the server lost it.
  void EndTensorAttempt(const OpPtr& op);
  // Whether `op` must wait for a detach before it completes.
  bool AwaitsDetach(const OpPtr& op);
  // Asks each server to detach the tensor sessions that unanswered
  // attempts named (blocking RPCs, on the timer thread); returns whether
  // some are still to be detached. See the .cc for when it gives up.
  bool DetachUnanswered();
  // Completes the parked ops that no longer wait for a detach.
  void ReleaseParked();
  // Ends an op: reads its answer and hands it to its caller, or parks it
  // (parked_) while a server may still touch its bytes in the tensor
  // region.
  void Complete(const OpPtr& op, absl::Status status,
                const grpc::ByteBuffer* response);
  absl::Status ReadResponse(const OpState& op, const grpc::ByteBuffer& response,
                            uint64_t* version, int64_t* min_clock);
  void RetryLater(const OpPtr& op, absl::Status why);
  void TimerLoop();

  absl::Mutex mu_;
  std::vector<std::priority_queue<OpPtr, std::vector<OpPtr>,
                                  ps_client_internal::ByPriority>>
      queues_ ABSL_GUARDED_BY(mu_);
  std::vector<int> in_flight_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  // Attempts created and not yet past their last access (AttemptFinished).
  std::atomic<int> live_attempts_{0};
  // A server answered a batch UNIMPLEMENTED (it predates PushBatch and
  // PullBatch): no more batches from this client.
  std::atomic<bool> no_batches_{false};
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool attach_wanted_ ABSL_GUARDED_BY(mu_) = false;  // for TimerLoop
  absl::Time next_attach_ ABSL_GUARDED_BY(mu_);      // the earliest retry
  std::multimap<absl::Time, OpPtr> retries_ ABSL_GUARDED_BY(mu_);
  // Ops that ended while a detach they wait for is still to come, with how
  // they ended (Complete).
  struct Parked {
    OpPtr op;
    absl::Status status;
    grpc::ByteBuffer response;
  };
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);
  // When the timer thread next tries the detaches that failed.
  absl::Time detach_retry_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::thread timer_;

  Bf16ErrorFeedback push_errors_;  // push_error_feedback
  PulledCopies pulled_;            // pull_compress
  CompressedErrorFeedback compress_errors_{
      options_.push_compress, options_.topk_ratio, options_.topk_momentum};
  absl::Mutex deferred_mu_;
  std::map<int64_t, std::vector<uint32_t>> deferred_
      ABSL_GUARDED_BY(deferred_mu_);
  absl::Mutex attach_mu_;  // one AttachShm at a time
  // The caller's tensor region: set once, under attach_mu_, by
  // ShareTensors before any op (ops read it without the lock).
  std::shared_ptr<ShmRegion> tensors_;
  // This process's UCX worker for the bulk plane, started by the first
  // AttachBulk (under attach_mu_), or why it could not start.
  std::shared_ptr<UcxNode> ucx_;
  absl::Status ucx_error_;
  absl::Mutex stub_mu_;
  // address -> stub; a restarted server at a new address gets a new one.
  absl::flat_hash_map<std::string, std::unique_ptr<Stubs>> stubs_
      ABSL_GUARDED_BY(stub_mu_);
};

}  // namespace strata

#endif  // STRATA_CLIENT_PS_CLIENT_IMPL_H_
