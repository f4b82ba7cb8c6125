#include "server/parameter_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cluster/scheduler_client.h"
#include "common/consistency.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "common/wire.h"
#include "server/ledger_reporter.h"
#include "server/shard.h"
#include "spdlog/spdlog.h"
#include "storage/data_dir.h"
#include "storage/ram_tier.h"
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
        v1::ParameterServer::Service>>;

constexpr int kPushDataField = v1::PushRequest::kDataFieldNumber;
constexpr int kPullDataField = v1::PullResponse::kDataFieldNumber;

class Service final : public ServiceBase {
 public:
  // Pushes and pulls have separate pools: pulls waiting at a BSP gate must
  // never hold the threads the pushes that close the step need.
  Service(Shard* shard, ParameterServer* owner, ThreadPool* push_pool,
          ThreadPool* pull_pool)
      : shard_(shard),
        owner_(owner),
        push_pool_(push_pool),
        pull_pool_(pull_pool) {}

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    push_pool_->Schedule([this, reactor, request, response] {
      reactor->Finish(ToGrpcStatus(HandlePush(*request, response)));
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    pull_pool_->Schedule([this, reactor, request, response] {
      reactor->Finish(ToGrpcStatus(HandlePull(*request, response)));
    });
    return reactor;
  }

  grpc::Status RegisterChunks(grpc::ServerContext*,
                              const v1::RegisterChunksRequest* req,
                              v1::RegisterChunksResponse* resp) override {
    auto r = shard_->Register(*req);
    if (r.ok()) *resp = *r;
    return ToGrpcStatus(r.status());
  }

  grpc::Status Snapshot(grpc::ServerContext*, const v1::SnapshotRequest* req,
                        v1::SnapshotResponse* resp) override {
    if (req->step() < 0)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "negative step");
    auto path = owner_->SnapshotNow(req->step());
    if (!path.ok()) return ToGrpcStatus(path.status());
    resp->set_step(req->step());
    resp->set_path(*path);
    resp->set_chunks(shard_->num_chunks());
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                     v1::StatsResponse* resp) override {
    shard_->FillStats(resp);
    return grpc::Status::OK;
  }

 private:
  absl::Status HandlePush(const grpc::ByteBuffer& request,
                          grpc::ByteBuffer* response) {
    PayloadMessage message;
    v1::PushRequest req;
    STRATA_RETURN_IF_ERROR(message.Parse(request, kPushDataField, &req));
    STRATA_ASSIGN_OR_RETURN(
        v1::PushResponse resp,
        shard_->Push(req, message.payload_size(),
                     [&message](char* dst) { message.CopyPayload(dst); }));
    return SerializeMessage(resp, response);
  }

  absl::Status HandlePull(const grpc::ByteBuffer& request,
                          grpc::ByteBuffer* response) {
    PayloadMessage message;
    v1::PullRequest req;
    STRATA_RETURN_IF_ERROR(message.Parse(request, /*field=*/0, &req));
    grpc::Slice payload;
    STRATA_ASSIGN_OR_RETURN(
        PullResult r, shard_->Pull(req, [&payload](size_t n) {
          payload = AllocateSlice(n);
          return reinterpret_cast<char*>(const_cast<uint8_t*>(payload.begin()));
        }));
    v1::PullResponse header;
    header.set_version(r.version);
    header.set_min_clock(r.min_clock);
    *response =
        SerializeWithPayload(header, kPullDataField, std::move(payload));
    return absl::OkStatus();
  }

  static absl::Status SerializeMessage(const google::protobuf::Message& msg,
                                       grpc::ByteBuffer* out) {
    grpc::Slice slice(msg.SerializeAsString());
    *out = grpc::ByteBuffer(&slice, 1);
    return absl::OkStatus();
  }

  Shard* shard_;
  ParameterServer* owner_;
  ThreadPool* push_pool_;
  ThreadPool* pull_pool_;
};

}  // namespace

struct ParameterServer::Impl {
  ServerOptions options;
  std::unique_ptr<Shard> shard;
  std::unique_ptr<DataDir> data_dir;
  std::unique_ptr<ThreadPool> push_handlers;
  std::unique_ptr<ThreadPool> pull_handlers;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<SchedulerClient> scheduler;
  std::unique_ptr<LedgerReporter> reporter;  // uses `scheduler`
  int port = 0;
  std::string address;
  int64_t restored_step = -1;

  // Automatic snapshots are written on one background thread, so the push
  // that closes a step does not wait for the disk. A newer consistent cut
  // replaces one not yet started: a slow disk costs snapshots, never
  // unbounded memory.
  absl::Mutex snap_mu;
  std::optional<std::pair<int64_t, std::unique_ptr<RamTier>>> snap_next
      ABSL_GUARDED_BY(snap_mu);
  bool snap_draining ABSL_GUARDED_BY(snap_mu) = false;  // a drain is queued
  std::unique_ptr<ThreadPool> snap_writer;              // one thread
  absl::Mutex write_mu;  // one snapshot write at a time
  absl::Mutex shutdown_mu;
  bool shut_down ABSL_GUARDED_BY(shutdown_mu) = false;

  absl::StatusOr<std::string> Write(int64_t step, const ChunkTier& capture) {
    if (!data_dir)
      return absl::FailedPreconditionError("this server has no --data_dir");
    absl::MutexLock lock(&write_mu);
    STRATA_RETURN_IF_ERROR(data_dir->WriteSnapshot(
        step, capture, shard->GroupsMetadata(), options.keep_snapshots));
    return data_dir->SnapshotPath(step);
  }

  // Queues the cut of `step` for the writer thread.
  void QueueSnapshot(int64_t step, std::unique_ptr<RamTier> capture) {
    {
      absl::MutexLock lock(&snap_mu);
      snap_next.emplace(step, std::move(capture));
      if (snap_draining) return;
      snap_draining = true;
    }
    snap_writer->Schedule([this] { DrainSnapshots(); });
  }

  // On the writer thread: writes queued cuts until none is left.
  void DrainSnapshots() {
    for (;;) {
      std::pair<int64_t, std::unique_ptr<RamTier>> job;
      {
        absl::MutexLock lock(&snap_mu);
        if (!snap_next.has_value()) {
          snap_draining = false;
          return;
        }
        job = std::move(*snap_next);
        snap_next.reset();
      }
      auto written = Write(job.first, *job.second);
      if (!written.ok()) {
        spdlog::error("strata server: snapshot of step {} failed: {}",
                      job.first, written.status().ToString());
      }
    }
  }
};

ParameterServer::ParameterServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ParameterServer::~ParameterServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Start(
    ServerOptions options) {
  if (options.shard < 0)
    return absl::InvalidArgumentError("--shard must be >= 0");
  if (options.snapshot_every < 0)
    return absl::InvalidArgumentError("--snapshot_every must be >= 0");
  if (options.keep_snapshots < 1)
    return absl::InvalidArgumentError("--keep_snapshots must be >= 1");
  if (options.scheduler_address.empty() && options.consistency.empty())
    options.consistency = "bsp";
  auto impl = std::make_unique<Impl>();
  impl->options = options;

  // The job's consistency: ours, checked against the scheduler's when known.
  std::unique_ptr<SchedulerClient> scheduler;
  std::string consistency_text = options.consistency;
  if (!options.consistency.empty()) {
    STRATA_RETURN_IF_ERROR(ParseConsistency(options.consistency).status());
  }

  if (!options.data_dir.empty()) {
    STRATA_ASSIGN_OR_RETURN(
        impl->data_dir,
        DataDir::Open(options.data_dir, ShardOwnerTag(options.shard)));
  }

  // Start gRPC first: the address we register must already answer.
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address,
                           grpc::InsecureServerCredentials(), &impl->port);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  grpc::ResourceQuota quota("strata-server");
  quota.SetMaxThreads(options.max_threads);
  builder.SetResourceQuota(quota);

  // The shard needs the consistency before any request; with a scheduler we
  // learn it from the view, so connect before building the shard.
  if (!options.scheduler_address.empty() && consistency_text.empty()) {
    // Peek at the job's setting without registering yet.
    SchedulerClientOptions peek;
    peek.scheduler_address = options.scheduler_address;
    peek.role = v1::ROLE_CLIENT;
    STRATA_ASSIGN_OR_RETURN(auto probe, SchedulerClient::Connect(peek));
    consistency_text = probe->view().consistency();
    if (consistency_text.empty()) consistency_text = "bsp";
  }
  STRATA_ASSIGN_OR_RETURN(Consistency consistency,
                          ParseConsistency(consistency_text));
  ShardOptions shard_options;
  shard_options.consistency = consistency;
  shard_options.max_wait = options.max_wait;
  shard_options.view_wait = options.view_wait;
  shard_options.snapshot_every = options.snapshot_every;
  shard_options.clock = options.clock;
  impl->shard = std::make_unique<Shard>(shard_options);

  if (options.restore_step >= 0 && !impl->data_dir) {
    return absl::InvalidArgumentError("--restore_step needs a --data_dir");
  }
  if (impl->data_dir) {
    std::optional<int64_t> latest;
    if (options.restore_step >= 0) {
      STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> held,
                              impl->data_dir->ListSnapshots());
      if (std::find(held.begin(), held.end(), options.restore_step) ==
          held.end()) {
        return absl::NotFoundError(absl::StrCat(options.data_dir,
                                                " holds no snapshot of step ",
                                                options.restore_step));
      }
      latest = options.restore_step;
      STRATA_RETURN_IF_ERROR(
          impl->data_dir->DropSnapshotsAfter(options.restore_step));
    } else {
      STRATA_ASSIGN_OR_RETURN(latest, impl->data_dir->LatestSnapshot());
    }
    if (latest.has_value()) {
      RamTier records;
      STRATA_ASSIGN_OR_RETURN(std::string meta,
                              impl->data_dir->LoadSnapshot(*latest, records));
      STRATA_RETURN_IF_ERROR(impl->shard->Restore(meta, records));
      impl->restored_step = *latest;
    }
  }

  auto owner =
      std::unique_ptr<ParameterServer>(new ParameterServer(std::move(impl)));
  Impl& me = *owner->impl_;
  // Pushes mostly run the optimizer, but one from a worker this server does
  // not know yet waits up to view_wait for the view: leave room for those.
  me.push_handlers = std::make_unique<ThreadPool>(
      std::max(16, 2 * static_cast<int>(std::thread::hardware_concurrency())));
  me.pull_handlers = std::make_unique<ThreadPool>(options.max_threads);
  me.service =
      std::make_unique<Service>(me.shard.get(), owner.get(),
                                me.push_handlers.get(), me.pull_handlers.get());
  builder.RegisterService(me.service.get());
  me.server = builder.BuildAndStart();
  if (!me.server || me.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address));
  }
  me.address = options.advertise_address.empty()
                   ? absl::StrCat("127.0.0.1:", me.port)
                   : options.advertise_address;
  me.snap_writer = std::make_unique<ThreadPool>(1);
  me.shard->set_snapshot_sink(
      [&me](int64_t step, std::unique_ptr<RamTier> capture) {
        me.QueueSnapshot(step, std::move(capture));
      });

  if (!options.scheduler_address.empty()) {
    SchedulerClientOptions so;
    so.scheduler_address = options.scheduler_address;
    so.role = v1::ROLE_SERVER;
    so.address = me.address;
    so.shard = options.shard;
    so.clock = options.clock;
    STRATA_ASSIGN_OR_RETURN(me.scheduler, SchedulerClient::Connect(so));
    const v1::View view = me.scheduler->view();
    if (!view.consistency().empty() &&
        view.consistency() != consistency.ToString()) {
      return absl::FailedPreconditionError(
          absl::StrCat("this server runs '", consistency.ToString(),
                       "' but the job runs '", view.consistency(), "'"));
    }
    Shard* shard = me.shard.get();
    // The sink first: a step closed as soon as the view arrives is reported.
    me.reporter =
        std::make_unique<LedgerReporter>(me.scheduler.get(), options.shard);
    shard->set_applied_sink(
        [r = me.reporter.get()](const v1::AppliedReport& a) { r->Add(a); });
    me.scheduler->AddViewListener(
        [shard](const v1::View& v) { shard->UpdateView(v); });
    shard->UpdateView(me.scheduler->view());
  }
  return owner;
}

int ParameterServer::port() const { return impl_->port; }
std::string ParameterServer::address() const { return impl_->address; }
Shard& ParameterServer::shard() { return *impl_->shard; }
int64_t ParameterServer::restored_step() const { return impl_->restored_step; }

absl::StatusOr<std::string> ParameterServer::SnapshotNow(int64_t step) {
  std::unique_ptr<RamTier> capture = impl_->shard->CaptureAll();
  return impl_->Write(step, *capture);
}

void ParameterServer::FlushSnapshots() {
  Impl& me = *impl_;
  absl::MutexLock lock(&me.snap_mu);
  me.snap_mu.Await(absl::Condition(
      +[](Impl* i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(i->snap_mu) {
        return !i->snap_draining;
      },
      &me));
}

void ParameterServer::Shutdown() {
  Impl& me = *impl_;
  // Held throughout: a second caller (the destructor after a signal-driven
  // shutdown) returns only once the first has finished.
  absl::MutexLock shutdown_lock(&me.shutdown_mu);
  if (me.shut_down) return;
  me.shut_down = true;
  if (me.reporter) {
    // What the shard applied reaches the ledger before we leave.
    me.reporter->Flush(absl::Seconds(2));
    me.shard->set_applied_sink(nullptr);
    me.reporter.reset();
  }
  me.scheduler.reset();  // leaves the cluster
  // Wake every gate and view waiter first: gRPC's Shutdown waits for every
  // call in flight to finish, and no push will come to release a pull.
  me.shard->Cancel();
  if (me.server)
    me.server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  // Run what was queued: every reactor gets finished.
  me.pull_handlers.reset();
  me.push_handlers.reset();
  FlushSnapshots();
  me.snap_writer.reset();
}

void ParameterServer::Wait() {
  if (impl_->server) impl_->server->Wait();
}

}  // namespace strata
