#include "server/ps_service.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/compress.h"
#include "common/status.h"
#include "common/wire.h"
#include "server/parameter_server.h"
#include "server/replica_catch_up.h"
#include "server/replica_forwarder.h"
#include "server/request_batch.h"
#include "server/server_metrics.h"
#include "spdlog/spdlog.h"
#include "strata/v1/ps.grpc.pb.h"

namespace strata {
namespace {

// gRPC edge. Push and Pull are raw callback methods: their payloads skip
// protobuf's copies (common/wire.h), and they run on pools of our own
// because a pull may wait at the consistency gate, which must not hold
// gRPC's own threads.
// The other methods are ordinary synchronous handlers.
using ServiceBase = v1::ParameterServer::WithRawCallbackMethod_Push<
    v1::ParameterServer::WithRawCallbackMethod_Pull<
        v1::ParameterServer::WithRawCallbackMethod_PushBatch<
            v1::ParameterServer::WithRawCallbackMethod_PullBatch<
                v1::ParameterServer::Service>>>>;

constexpr int kPushDataField = v1::PushRequest::kDataFieldNumber;
constexpr int kPullDataField = v1::PullResponse::kDataFieldNumber;

class Service final : public ServiceBase {
 public:
  // Pushes and pulls have separate pools: pulls waiting at a BSP gate must
  // never hold the threads the pushes that close the step need.
  Service(Shard* shard, ShmSessions* shm, BulkSessions* bulk,
          ParameterServer* owner, ReplicaForwarder* replicas,
          ReplicaCatchUp* catch_up, ThreadPool* push_pool,
          ThreadPool* pull_pool, Metrics* metrics, const Security* security)
      : security_(security),
        shard_(shard),
        replicas_(replicas),
        catch_up_(catch_up),
        shm_(shm),
        bulk_(bulk),
        owner_(owner),
        push_pool_(push_pool),
        pull_pool_(pull_pool),
        metrics_(
            metrics, shard,
            [this] { return shm_payloads_.load(std::memory_order_relaxed); },
            [this] {
              return shm_tensor_payloads_.load(std::memory_order_relaxed);
            }) {
    metrics->AddCounterFn("strata_server_batch_calls_total",
                          "PushBatch and PullBatch calls answered", [this] {
                            return static_cast<double>(
                                batch_calls_.load(std::memory_order_relaxed));
                          });
    metrics->AddCounterFn(
        "strata_server_batched_requests_total",
        "Pushes and pulls that came in a PushBatch or PullBatch", [this] {
          return static_cast<double>(
              batched_requests_.load(std::memory_order_relaxed));
        });
  }

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (absl::Status s = security_->Authorize(*ctx, "Push", kWriters);
        !s.ok()) {
      Finish(ServerMetrics::kPush, absl::Now(), ctx, reactor, s);
      return reactor;
    }
    push_pool_->Schedule(
        [this, ctx, reactor, request, response, start = absl::Now()] {
          Finish(ServerMetrics::kPush, start, ctx, reactor,
                 HandlePush(*request, response));
        });
    return reactor;
  }

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (absl::Status s = security_->Authorize(*ctx, "Pull", kWorkers);
        !s.ok()) {
      Finish(ServerMetrics::kPull, absl::Now(), ctx, reactor, s);
      return reactor;
    }
    pull_pool_->Schedule(
        [this, ctx, reactor, request, response, start = absl::Now()] {
          Finish(ServerMetrics::kPull, start, ctx, reactor,
                 HandlePull(*request, response));
        });
    return reactor;
  }

  // A batch runs on its method's pool, its requests one after another.
  grpc::ServerUnaryReactor* PushBatch(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override {
    return StartBatch(ServerMetrics::kPush, "PushBatch", kWriters, push_pool_,
                      ctx, request, response);
  }

  grpc::ServerUnaryReactor* PullBatch(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override {
    return StartBatch(ServerMetrics::kPull, "PullBatch", kWorkers, pull_pool_,
                      ctx, request, response);
  }

  grpc::Status RegisterChunks(grpc::ServerContext* ctx,
                              const v1::RegisterChunksRequest* req,
                              v1::RegisterChunksResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(
        security_->Authorize(*ctx, "RegisterChunks", kWriters));
    ReplicaForwarder::Change change(*replicas_);
    STRATA_RETURN_GRPC_IF_ERROR(replicas_->Admit(req->forwarded_by()));
    if (replicas_->missing_backups() && shard_->num_chunks() == 0) {
      // Chunks made now would be missing on the backups still to join.
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "this slot waits for its backup replicas to join");
    }
    STRATA_RETURN_GRPC_IF_ERROR(replicas_->Register(*req));
    auto r = shard_->Register(*req);
    if (r.ok()) *resp = *r;
    return ToGrpcStatus(r.status());
  }

  grpc::Status Snapshot(grpc::ServerContext* ctx,
                        const v1::SnapshotRequest* req,
                        v1::SnapshotResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(
        security_->Authorize(*ctx, "Snapshot", kSnapshotters));
    if (req->step() < 0)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "negative step");
    auto path = owner_->SnapshotNow(req->step());
    if (!path.ok()) return ToGrpcStatus(path.status());
    // The backups take one too, so that every replica's directory holds
    // the step (a reader picks each slot's replica with the newest). The
    // caller's snapshot is this one: a backup's failure is only logged.
    if (absl::Status s = replicas_->Snapshot(*req); !s.ok()) {
      spdlog::warn("strata server: a backup's snapshot of step {}: {}",
                   req->step(), s.ToString());
    }
    resp->set_step(req->step());
    resp->set_path(*path);
    resp->set_chunks(shard_->num_chunks());
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext* ctx, const v1::StatsRequest*,
                     v1::StatsResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(security_->Authorize(*ctx, "Stats", kReaders));
    shard_->FillStats(resp);
    resp->set_shm_payloads(shm_payloads_.load(std::memory_order_relaxed));
    resp->set_shm_tensor_payloads(
        shm_tensor_payloads_.load(std::memory_order_relaxed));
    resp->set_bulk_payloads(bulk_payloads_.load(std::memory_order_relaxed));
    resp->set_bulk_attaches(bulk_->attached());
    resp->set_replica_forwards(replicas_->forwarded());
    resp->set_batch_calls(batch_calls_.load(std::memory_order_relaxed));
    resp->set_batched_requests(
        batched_requests_.load(std::memory_order_relaxed));
    return grpc::Status::OK;
  }

  grpc::Status Commit(grpc::ServerContext* ctx, const v1::CommitRequest* req,
                      v1::CommitResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(security_->Authorize(*ctx, "Commit", kWriters));
    ReplicaForwarder::Change change(*replicas_);
    STRATA_RETURN_GRPC_IF_ERROR(replicas_->Admit(req->forwarded_by()));
    const absl::Time start = absl::Now();
    const absl::Status forwarded = replicas_->Commit(*req);
    absl::StatusOr<v1::CommitResponse> r =
        forwarded.ok() ? shard_->Commit(*req)
                       : absl::StatusOr<v1::CommitResponse>(forwarded);
    if (r.ok()) *resp = *r;
    metrics_.Answered(ServerMetrics::kCommit, r.status(), absl::Now() - start);
    return ToGrpcStatus(r.status());
  }

  grpc::Status Reduce(grpc::ServerContext* ctx, const v1::ReduceRequest* req,
                      v1::ReduceResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(security_->Authorize(*ctx, "Reduce", kWriters));
    STRATA_RETURN_GRPC_IF_ERROR(replicas_->Admit(req->forwarded_by()));
    // Reduction 0's partials change nothing (and may wait for the step to
    // close): only totals are a change, forwarded to the backups first.
    std::optional<ReplicaForwarder::Change> change;
    if (req->phase() > 0) {
      change.emplace(*replicas_);
      STRATA_RETURN_GRPC_IF_ERROR(replicas_->Reduce(*req));
    }
    absl::StatusOr<v1::ReduceResponse> r = shard_->Reduce(*req);
    if (r.ok()) *resp = *std::move(r);
    return ToGrpcStatus(r.status());
  }

  grpc::Status CatchUp(grpc::ServerContext* ctx, const v1::CatchUpRequest* req,
                       v1::CatchUpResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(
        security_->Authorize(*ctx, "CatchUp", kServers));
    absl::StatusOr<v1::CatchUpResponse> r = catch_up_->Serve(*req);
    if (r.ok()) *resp = *std::move(r);
    return ToGrpcStatus(r.status());
  }

  grpc::Status InstallState(grpc::ServerContext* ctx,
                            grpc::ServerReader<v1::ShardStatePart>* reader,
                            v1::InstallStateResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(
        security_->Authorize(*ctx, "InstallState", kServers));
    absl::StatusOr<uint64_t> r = catch_up_->Install(
        [reader](v1::ShardStatePart* part) { return reader->Read(part); });
    if (r.ok()) resp->set_chunks(*r);
    return ToGrpcStatus(r.status());
  }

  grpc::Status AttachShm(grpc::ServerContext* ctx,
                         const v1::AttachShmRequest* req,
                         v1::AttachShmResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(
        security_->Authorize(*ctx, "AttachShm", kWorkers));
    // Only members map memory here (each at most one region of each kind:
    // slots, tensors).
    if (absl::Status s = shard_->AwaitWorker(req->member_id(), req->epoch());
        !s.ok()) {
      return ToGrpcStatus(s);
    }
    absl::StatusOr<uint64_t> session = shm_->Attach(*req);
    if (session.ok()) resp->set_session(*session);
    return ToGrpcStatus(session.status());
  }

  grpc::Status DetachShm(grpc::ServerContext* ctx,
                         const v1::DetachShmRequest* req,
                         v1::DetachShmResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(
        security_->Authorize(*ctx, "DetachShm", kWorkers));
    // No membership check: a member fenced out of the view detaches the
    // sessions of its earlier id. The random id is the capability.
    resp->set_held(shm_->Detach(req->session()));
    if (resp->held()) {
      // Rare: after a call of that member that got no answer.
      spdlog::info("strata server: member {} detached shared-memory session {}",
                   req->member_id(), req->session());
    }
    return grpc::Status::OK;
  }

  grpc::Status AttachBulk(grpc::ServerContext* ctx,
                          const v1::AttachBulkRequest* req,
                          v1::AttachBulkResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(
        security_->Authorize(*ctx, "AttachBulk", kWorkers));
    if (absl::Status s = shard_->AwaitWorker(req->member_id(), req->epoch());
        !s.ok()) {
      return ToGrpcStatus(s);
    }
    absl::StatusOr<v1::AttachBulkResponse> r = bulk_->Attach(*req);
    if (r.ok()) *resp = *std::move(r);
    return ToGrpcStatus(r.status());
  }

  grpc::Status DetachBulk(grpc::ServerContext* ctx,
                          const v1::DetachBulkRequest* req,
                          v1::DetachBulkResponse* resp) override {
    STRATA_RETURN_GRPC_IF_ERROR(
        security_->Authorize(*ctx, "DetachBulk", kWorkers));
    resp->set_held(bulk_->Detach(req->session()));
    return grpc::Status::OK;
  }

 private:
  // How long a push's handler waits for its payload on the bulk plane,
  // and a pull's for its caller to take the weights. The caller sent the
  // payload (posted the receive) before its request: this is only for a
  // peer that vanished.
  static constexpr absl::Duration kBulkWait = absl::Seconds(30);

  // Ends a push or pull. Its trailing metadata tells the client this
  // handler answered (so a shared-memory slot it named is free again), and
  // whether the slot's session is unknown here (attach again).
  void Finish(ServerMetrics::Method method, absl::Time start,
              grpc::CallbackServerContext* ctx,
              grpc::ServerUnaryReactor* reactor, const absl::Status& status) {
    metrics_.Answered(method, status, absl::Now() - start);
    ctx->AddTrailingMetadata(kHandledKey, "1");
    if (IsNoSessionError(status)) ctx->AddTrailingMetadata(kShmLostKey, "1");
    reactor->Finish(ToGrpcStatus(status));
  }

  grpc::ServerUnaryReactor* StartBatch(ServerMetrics::Method method,
                                       const char* name,
                                       std::initializer_list<Role> roles,
                                       ThreadPool* pool,
                                       grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (absl::Status s = security_->Authorize(*ctx, name, roles); !s.ok()) {
      Finish(method, absl::Now(), ctx, reactor, s);  // nothing was touched
      return reactor;
    }
    pool->Schedule([this, method, ctx, reactor, request, response] {
      absl::Status s = HandleBatch(method, *request, response);
      // Every request named in the batch was handled (or none was): its
      // shared-memory slots are free again.
      ctx->AddTrailingMetadata(kHandledKey, "1");
      reactor->Finish(ToGrpcStatus(s));
    });
    return reactor;
  }

  // The requests of a PushBatch or PullBatch (server/request_batch.h),
  // each handled as its own call would be and counted in the metrics as
  // one.
  absl::Status HandleBatch(ServerMetrics::Method method,
                           const grpc::ByteBuffer& request,
                           grpc::ByteBuffer* response) {
    STRATA_ASSIGN_OR_RETURN(
        const int requests,
        RunBatch(
            request, response,
            [&](const grpc::ByteBuffer& one, grpc::ByteBuffer* answer,
                absl::Time batch_start) {
              return method == ServerMetrics::kPush
                         ? HandlePush(one, answer)
                         : HandlePull(one, answer, batch_start);
            },
            [&](const absl::Status& s, absl::Duration took) {
              metrics_.Answered(method, s, took);
            }));
    batch_calls_.fetch_add(1, std::memory_order_relaxed);
    batched_requests_.fetch_add(requests, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::Status HandlePush(const grpc::ByteBuffer& request,
                          grpc::ByteBuffer* response) {
    PayloadMessage message;
    v1::PushRequest req;
    STRATA_RETURN_IF_ERROR(message.Parse(request, kPushDataField, &req));
    // A payload on the bulk plane is taken first, whatever the answer: its
    // sender waits until it is.
    grpc::Slice bulk_payload;
    if (req.has_bulk()) {
      STRATA_ASSIGN_OR_RETURN(bulk_payload, ReceiveBulk(req, message));
    }
    ReplicaForwarder::Change change(*replicas_);
    STRATA_RETURN_IF_ERROR(replicas_->Admit(req.forwarded_by()));
    absl::StatusOr<v1::PushResponse> resp;
    if (req.has_bulk()) {
      resp = PushBytes(req, bulk_payload);
      if (resp.ok()) bulk_payloads_.fetch_add(1, std::memory_order_relaxed);
    } else if (req.has_shm()) {
      if (message.has_payload()) {
        return absl::InvalidArgumentError(
            "a push carries its gradient in data or in shm, not both");
      }
      STRATA_ASSIGN_OR_RETURN(ShmSpan span,
                              shm_->Resolve(req.shm(), req.member_id()));
      resp = replicas_->forwarding() ? PushShmReplicated(req, span)
                                     : PushShm(req, span);
      if (resp.ok()) CountShm(span);
    } else {
      // The backups get the request as it came, before it applies here.
      STRATA_RETURN_IF_ERROR(replicas_->Push(request));
      resp = shard_->Push(req, message.payload_size(),
                          [&message](char* dst, size_t begin, size_t n) {
                            message.CopyPayload(dst, begin, n);
                            return absl::OkStatus();
                          });
    }
    STRATA_RETURN_IF_ERROR(resp.status());
    return SerializeMessage(*resp, response);
  }

  // A push's gradient on the bulk plane, received.
  absl::StatusOr<grpc::Slice> ReceiveBulk(const v1::PushRequest& req,
                                          const PayloadMessage& message) {
    if (message.has_payload() || req.has_shm()) {
      return absl::InvalidArgumentError(
          "a push carries its gradient in one of data, shm and bulk");
    }
    // The chunk's size, not the request's word, bounds what is allocated.
    STRATA_ASSIGN_OR_RETURN(const uint64_t numel,
                            shard_->ChunkNumel(req.chunk_id()));
    size_t bytes = numel * ElementBytes(req.dtype());
    if (req.dtype() == v1::DTYPE_ONEBIT) bytes = OneBitBytes(numel);
    if (req.dtype() == v1::DTYPE_TOPK) {
      // Its size depends on the sender's k: messages or shared memory.
      return absl::InvalidArgumentError(
          "TOPK pushes travel in messages or shared memory, not bulk");
    }
    return bulk_->Receive(req.bulk(), req.member_id(), bytes,
                          absl::Now() + kBulkWait);
  }

  // A push through shared memory. Each block is copied out of the shared
  // bytes before anything checks it: the caller could change them
  // meanwhile. The use spans the copies only: a detach waits for them, not
  // for the update.
  absl::StatusOr<v1::PushResponse> PushShm(const v1::PushRequest& req,
                                           const ShmSpan& span) {
    ShmUse use(span);
    return shard_->Push(req, span.size,
                        [&](char* dst, size_t begin, size_t n) -> absl::Status {
                          if (!use.Begin())
                            return ShmUse::NoSessionError(req.shm().session());
                          std::memcpy(dst, span.data + begin, n);
                          if (begin + n == span.size) use.End();
                          return absl::OkStatus();
                        });
  }

  // The same, on a primary with backups: the bytes are copied out once,
  // sent to the backups in a message, then applied here from that copy, so
  // every replica applies the same bytes.
  absl::StatusOr<v1::PushResponse> PushShmReplicated(const v1::PushRequest& req,
                                                     const ShmSpan& span) {
    grpc::Slice copy = AllocateSlice(span.size);
    char* bytes = reinterpret_cast<char*>(const_cast<uint8_t*>(copy.begin()));
    {
      ShmUse use(span);
      if (!use.Begin()) return ShmUse::NoSessionError(req.shm().session());
      std::memcpy(bytes, span.data, span.size);
      use.End();
    }
    return PushBytes(req, copy);
  }

  // A push whose gradient this server holds in `payload` (copied out of
  // shared memory, received on the bulk plane): sent to the backups in a
  // message when there are any, then applied here from the same bytes.
  absl::StatusOr<v1::PushResponse> PushBytes(const v1::PushRequest& req,
                                             const grpc::Slice& payload) {
    if (replicas_->forwarding()) {
      v1::PushRequest header = req;
      header.clear_shm();
      header.clear_bulk();
      STRATA_RETURN_IF_ERROR(replicas_->Push(
          SerializeWithPayload(header, kPushDataField, payload)));
    }
    const char* bytes = reinterpret_cast<const char*>(payload.begin());
    return shard_->Push(req, payload.size(),
                        [bytes](char* dst, size_t begin, size_t n) {
                          std::memcpy(dst, bytes + begin, n);
                          return absl::OkStatus();
                        });
  }

  // A pull; its gate wait ends max_wait after `wait_from` (unset: now).
  absl::Status HandlePull(const grpc::ByteBuffer& request,
                          grpc::ByteBuffer* response,
                          std::optional<absl::Time> wait_from = std::nullopt) {
    PayloadMessage message;
    v1::PullRequest req;
    STRATA_RETURN_IF_ERROR(message.Parse(request, /*field=*/0, &req));
    if (req.has_shm() && req.has_bulk()) {
      return absl::InvalidArgumentError(
          "a pull names shm or bulk for its weights, not both");
    }
    if (req.has_shm()) {
      STRATA_ASSIGN_OR_RETURN(ShmSpan span,
                              shm_->Resolve(req.shm(), req.member_id()));
      // The use begins once the pull is served (after any wait at the
      // gate) and ends after the weights are written.
      ShmUse use(span);
      absl::StatusOr<PullResult> served = shard_->Pull(
          req,
          [&](size_t n) {
            if (n > span.size || !use.Begin())
              return static_cast<char*>(nullptr);
            return span.data;
          },
          wait_from);
      use.End();
      if (use.refused()) return ShmUse::NoSessionError(req.shm().session());
      STRATA_ASSIGN_OR_RETURN(PullResult r, std::move(served));
      CountShm(span);
      v1::PullResponse header;
      header.set_version(r.version);
      header.set_min_clock(r.min_clock);
      return SerializeMessage(header, response);
    }
    grpc::Slice payload;
    STRATA_ASSIGN_OR_RETURN(PullResult r,
                            shard_->Pull(
                                req,
                                [&payload](size_t n) {
                                  payload = AllocateSlice(n);
                                  return reinterpret_cast<char*>(
                                      const_cast<uint8_t*>(payload.begin()));
                                },
                                wait_from));
    v1::PullResponse header;
    header.set_version(r.version);
    header.set_min_clock(r.min_clock);
    header.set_dtype(r.dtype);
    header.set_delta_base(r.delta_base);
    header.set_delta_seq(r.delta_seq);
    if (req.has_bulk()) {
      // The weights go to the receive the caller posted; the answer
      // follows once they are there.
      STRATA_RETURN_IF_ERROR(bulk_->Send(req.bulk(), req.member_id(), payload,
                                         absl::Now() + kBulkWait));
      bulk_payloads_.fetch_add(1, std::memory_order_relaxed);
      return SerializeMessage(header, response);
    }
    *response =
        SerializeWithPayload(header, kPullDataField, std::move(payload));
    return absl::OkStatus();
  }

  // A push or pull served through shared memory at `span`.
  void CountShm(const ShmSpan& span) {
    shm_payloads_.fetch_add(1, std::memory_order_relaxed);
    if (span.tensors)
      shm_tensor_payloads_.fetch_add(1, std::memory_order_relaxed);
  }

  static absl::Status SerializeMessage(const google::protobuf::Message& msg,
                                       grpc::ByteBuffer* out) {
    grpc::Slice slice(msg.SerializeAsString());
    *out = grpc::ByteBuffer(&slice, 1);
    return absl::OkStatus();
  }

  static constexpr std::initializer_list<Role> kWorkers = {Role::kWorker};
  static constexpr std::initializer_list<Role> kServers = {Role::kServer};
  // Requests that change the shard: from workers, and from the slot's
  // primary forwarding them to its backups (server/replica_forwarder.h).
  static constexpr std::initializer_list<Role> kWriters = {Role::kWorker,
                                                           Role::kServer};
  // Snapshots: asked by workers and tools, and by a primary of its
  // backups.
  static constexpr std::initializer_list<Role> kSnapshotters = {
      Role::kWorker, Role::kClient, Role::kServer};
  static constexpr std::initializer_list<Role> kReaders = {
      Role::kWorker, Role::kClient, Role::kScheduler, Role::kServer};

  const Security* security_;
  Shard* shard_;
  ReplicaForwarder* replicas_;
  ReplicaCatchUp* catch_up_;
  ShmSessions* shm_;
  BulkSessions* bulk_;
  ParameterServer* owner_;
  ThreadPool* push_pool_;
  ThreadPool* pull_pool_;
  std::atomic<uint64_t> shm_payloads_{0};
  std::atomic<uint64_t> shm_tensor_payloads_{0};
  std::atomic<uint64_t> bulk_payloads_{0};
  std::atomic<uint64_t> batch_calls_{0};
  std::atomic<uint64_t> batched_requests_{0};
  ServerMetrics metrics_;
};

}  // namespace

std::unique_ptr<grpc::Service> NewParameterServerService(
    Shard* shard, ShmSessions* shm, BulkSessions* bulk, ParameterServer* owner,
    ReplicaForwarder* replicas, ReplicaCatchUp* catch_up, ThreadPool* push_pool,
    ThreadPool* pull_pool, Metrics* metrics, const Security* security) {
  return std::make_unique<Service>(shard, shm, bulk, owner, replicas, catch_up,
                                   push_pool, pull_pool, metrics, security);
}

}  // namespace strata
