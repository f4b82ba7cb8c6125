#include "server/parameter_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cluster/scheduler_client.h"
#include "common/consistency.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "common/wire.h"
#include "rpc/health.h"
#include "server/bulk_sessions.h"
#include "server/ledger_reporter.h"
#include "server/ps_service.h"
#include "server/replica_catch_up.h"
#include "server/replica_forwarder.h"
#include "server/shard.h"
#include "server/shm_sessions.h"
#include "server/snapshot_keeper.h"
#include "spdlog/spdlog.h"
#include "storage/data_dir.h"
#include "storage/ram_tier.h"
#include "storage/rocksdb_crc32c.h"
#include "storage/spill_store.h"
#include "strata/v1/ps.grpc.pb.h"

namespace strata {
struct ParameterServer::Impl {
  ServerOptions options;
  Metrics metrics;  // read by the service's series: outlives it
  std::unique_ptr<Shard> shard;
  ShmSessions shm;
  std::unique_ptr<BulkSessions> bulk;
  std::unique_ptr<DataDir> data_dir;
  std::unique_ptr<SnapshotKeeper> snapshots;  // uses `data_dir` and `shard`
  std::unique_ptr<ThreadPool> push_handlers;
  std::unique_ptr<ThreadPool> pull_handlers;
  std::unique_ptr<ReplicaForwarder> replicas;  // used by `service`
  std::unique_ptr<ReplicaCatchUp> catch_up;    // uses `replicas`, `scheduler`
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<SchedulerClient> scheduler;
  std::unique_ptr<LedgerReporter> reporter;  // uses `scheduler`
  int port = 0;
  std::string address;
  int64_t restored_step = -1;
  std::atomic<int64_t> state_step{-1};  // written under view_mu
  absl::Mutex shutdown_mu;
  bool shut_down ABSL_GUARDED_BY(shutdown_mu) = false;
  absl::Mutex view_mu;  // one view handled at a time
  absl::Mutex fatal_mu;
  absl::Status fatal ABSL_GUARDED_BY(fatal_mu);
  bool stopping ABSL_GUARDED_BY(fatal_mu) = false;  // Shutdown has begun
  std::thread fatal_thread ABSL_GUARDED_BY(fatal_mu);

  // Start's phases after the shard is built (each a step of it, in order).
  // Loads the snapshot --restore_step names, or the newest one, if any.
  absl::Status RestoreSnapshot();
  // Builds the handlers and the sinks, and starts the gRPC server.
  absl::Status Serve(ParameterServer* self);
  // Registers with the scheduler and follows the job's views.
  absl::Status JoinJob(ParameterServer* self, const Consistency& consistency);

  // A new view, in which this server is member `self_id`: first the job's
  // rollback, if it is newer than ours, then the live workers: the
  // shared-memory sessions' list before the shard's, so that a member AttachShm
  // finds in the shard's view (AwaitWorker) is in the sessions' list too. The
  // other way round, a worker that had just joined could be refused its attach
  // (UNAVAILABLE) and send its first payloads in messages until it tried again.
  void OnView(ParameterServer* owner, const v1::View& view, uint64_t self_id) {
    absl::MutexLock lock(&view_mu);
    // A server joining its slot takes the primary's state, rolled back
    // already, rather than roll back its own (it may not hold the step).
    if (view.generation() > shard->generation() &&
        !(Joining(view, self_id) && !catch_up->installed())) {
      absl::Status s =
          snapshots->RollBack(view.generation(), view.rollback_step());
      if (!s.ok()) {
        // Serving another step than the job's would lose it: stop.
        Fail(owner, s);
        return;
      }
      state_step = view.rollback_step();
    }
    std::vector<uint64_t> workers;
    for (const v1::Member& w : view.workers()) workers.push_back(w.id());
    std::sort(workers.begin(), workers.end());
    shm.RetainOnly(workers);
    bulk->RetainOnly(workers);
    // The replicas' roles before the shard's workers: a backup promoted in
    // this view forwards every push the new view lets in.
    replicas->UpdateView(view, self_id);
    shard->UpdateView(view);
    // A server joining its slot while the job runs catches up from the
    // slot's primary (server/replica_catch_up.h).
    catch_up->OnView(ReplicaCatchUp::Joiner{
        address,
        [this](uint64_t primary) { return scheduler->CaughtUp(primary); },
        [this, owner](const absl::Status& why) { Fail(owner, why); }});
  }

  // Whether `view` lists member `self_id` as joining its slot.
  static bool Joining(const v1::View& view, uint64_t self_id) {
    for (const v1::ShardSlot& slot : view.shard_map().slots()) {
      for (const v1::ShardReplica& j : slot.joining()) {
        if (j.member_id() == self_id) return true;
      }
    }
    return false;
  }

  // Stops the server (on a thread of its own: callers may be threads the
  // shutdown joins) with `why` as ParameterServer::fatal().
  void Fail(ParameterServer* owner, const absl::Status& why) {
    absl::MutexLock lock(&fatal_mu);
    if (!fatal.ok() || stopping) return;
    spdlog::error("strata server: stopping: {}", why.ToString());
    fatal = why;
    fatal_thread = std::thread([owner] { owner->Shutdown(); });
  }
};

ParameterServer::ParameterServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ParameterServer::~ParameterServer() {
  // Shutdown first: after it begins, Fail starts no thread; one it started
  // before runs Shutdown too, which returns once this one has finished.
  Shutdown();
  std::thread fatal_thread;
  {
    absl::MutexLock lock(&impl_->fatal_mu);
    fatal_thread = std::move(impl_->fatal_thread);
  }
  if (fatal_thread.joinable()) fatal_thread.join();
}

absl::Status ParameterServer::fatal() const {
  absl::MutexLock lock(&impl_->fatal_mu);
  return impl_->fatal;
}

namespace {

// ServerOptions::evict. "auto" is just_used under every consistency: it
// did better than lru end to end under SSP and ASP too, with one worker
// and with two (docs/BENCHMARKS.md), where each worker's deferred commit
// uses each tile once a step, and two workers' commits of one chunk come
// a step's compute apart, not close together.
absl::StatusOr<SpillOptions::Eviction> ParseEviction(const std::string& evict) {
  using E = SpillOptions::Eviction;
  if (evict == "lru") return E::kLeastRecent;
  if (evict == "farthest") return E::kFarthest;
  if (evict == "just_used" || evict == "auto") return E::kJustUsed;
  return absl::InvalidArgumentError(absl::StrCat(
      "--evict ", evict, ": one of auto, lru, farthest, just_used"));
}

// Start's checks of its options, before anything is opened; a server
// without a scheduler that names no consistency runs BSP.
absl::Status CheckOptions(ServerOptions& options) {
  if (options.shard < 0)
    return absl::InvalidArgumentError("--shard must be >= 0");
  if (options.snapshot_every < 0)
    return absl::InvalidArgumentError("--snapshot_every must be >= 0");
  if (options.keep_snapshots < 1)
    return absl::InvalidArgumentError("--keep_snapshots must be >= 1");
  if (options.ram_budget > 0 && options.data_dir.empty()) {
    return absl::InvalidArgumentError(
        "--ram_budget needs a --data_dir (tiles that do not fit spill to "
        "<data_dir>/spill)");
  }
  if (options.restore_step >= 0 && options.data_dir.empty())
    return absl::InvalidArgumentError("--restore_step needs a --data_dir");
  if (options.scheduler_address.empty() && !options.consistency.has_value())
    options.consistency = Consistency();
  if (options.consistency.has_value()) {
    STRATA_RETURN_IF_ERROR(ValidateConsistency(*options.consistency));
  }
  // Checked with a budget or without: a bad value is an error either way.
  return ParseEviction(options.evict).status();
}

// The job's consistency: the server's own setting, or (none given) the
// one the scheduler's view carries, peeked at without registering: the
// shard needs it before any request.
absl::StatusOr<Consistency> JobConsistency(const ServerOptions& options) {
  if (options.consistency.has_value()) return *options.consistency;
  SchedulerClientOptions peek;
  peek.scheduler_address = options.scheduler_address;
  peek.role = v1::ROLE_CLIENT;
  peek.security = options.security;
  STRATA_ASSIGN_OR_RETURN(auto probe, SchedulerClient::Connect(peek));
  const std::string text = probe->view().consistency();
  return ParseConsistency(text.empty() ? "bsp" : text);
}

// Threads serving pushes. Pushes mostly run the optimizer, but one from a
// worker this server does not know yet waits up to view_wait for the view:
// leave room for those (half of them at most: ShardOptions::max_view_waits).
int PushHandlerThreads() {
  return std::max(16,
                  2 * static_cast<int>(std::thread::hardware_concurrency()));
}

// The shard's options, with its spill tier (opened) under a RAM budget.
absl::StatusOr<ShardOptions> MakeShardOptions(const ServerOptions& options,
                                              const Consistency& consistency) {
  ShardOptions shard_options;
  shard_options.consistency = consistency;
  shard_options.max_wait = options.max_wait;
  shard_options.view_wait = options.view_wait;
  shard_options.max_view_waits = PushHandlerThreads() / 2;
  shard_options.snapshot_every = options.snapshot_every;
  shard_options.clock = options.clock;
  if (options.ram_budget == 0) return shard_options;
  SpillOptions spill;
  spill.ram_budget = options.ram_budget;
  spill.dir = options.data_dir + "/spill";
  spill.prefetch_depth = options.prefetch_depth;
  spill.write_behind = options.write_behind;
  STRATA_ASSIGN_OR_RETURN(spill.eviction, ParseEviction(options.evict));
  spill.pinned_bytes = options.pinned_bytes;
  absl::StatusOr<std::unique_ptr<SpillStore>> store = SpillStore::Open(spill);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("the spill tier in ", spill.dir, ": ",
                                     store.status().message()));
  }
  shard_options.spill = *std::move(store);
  spdlog::info("strata server: RocksDB's CRC-32C of spilled tiles: {}",
               RocksDbCrc32cIsStratas() ? "Strata's (storage/rocksdb_crc32c.h)"
                                        : "the library's own");
  return shard_options;
}

// The bulk plane this server offers (ServerOptions::wire).
std::unique_ptr<BulkSessions> MakeBulkSessions(const ServerOptions& options) {
  if (options.wire == WireKind::kGrpc)
    return BulkSessions::Refusing("this server runs with --wire grpc");
  UcxNode::Options ucx;
  ucx.transports = options.ucx_transports;
  // Payloads sealed wherever the channels are TLS, unless the fabric is
  // trusted.
  return std::make_unique<BulkSessions>(
      ucx, options.security->tls() && !options.bulk_insecure);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Start(
    ServerOptions options) {
  STRATA_RETURN_IF_ERROR(CheckOptions(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (!options.data_dir.empty()) {
    STRATA_ASSIGN_OR_RETURN(
        impl->data_dir,
        DataDir::Open(options.data_dir, ShardOwnerTag(options.shard)));
  }
  STRATA_ASSIGN_OR_RETURN(const Consistency consistency,
                          JobConsistency(options));
  STRATA_ASSIGN_OR_RETURN(ShardOptions shard_options,
                          MakeShardOptions(options, consistency));
  impl->shard = std::make_unique<Shard>(std::move(shard_options));
  STRATA_RETURN_IF_ERROR(impl->RestoreSnapshot());
  auto owner =
      std::unique_ptr<ParameterServer>(new ParameterServer(std::move(impl)));
  // gRPC first: the address the server registers must already answer.
  STRATA_RETURN_IF_ERROR(owner->impl_->Serve(owner.get()));
  if (!options.scheduler_address.empty()) {
    STRATA_RETURN_IF_ERROR(owner->impl_->JoinJob(owner.get(), consistency));
  }
  // Ready: registered (when there is a scheduler) and restored.
  SetServing(owner->impl_->server.get(), true);
  return owner;
}

absl::Status ParameterServer::Impl::RestoreSnapshot() {
  if (!data_dir) return absl::OkStatus();
  std::optional<int64_t> latest;
  if (options.restore_step >= 0) {
    STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> held,
                            data_dir->ListSnapshots());
    if (std::find(held.begin(), held.end(), options.restore_step) ==
        held.end()) {
      return absl::NotFoundError(absl::StrCat(options.data_dir,
                                              " holds no snapshot of step ",
                                              options.restore_step));
    }
    latest = options.restore_step;
    STRATA_RETURN_IF_ERROR(data_dir->DropSnapshotsAfter(options.restore_step));
  } else {
    STRATA_ASSIGN_OR_RETURN(latest, data_dir->LatestSnapshot());
  }
  if (!latest.has_value()) return absl::OkStatus();
  // On the spill disk for a shard with a budget: the snapshot may be
  // larger than RAM.
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ChunkTier> records,
                          shard->NewScratchTier());
  STRATA_ASSIGN_OR_RETURN(std::string meta,
                          data_dir->LoadSnapshot(*latest, *records));
  STRATA_RETURN_IF_ERROR(shard->Restore(meta, *records));
  restored_step = *latest;
  state_step = *latest;
  return absl::OkStatus();
}

absl::Status ParameterServer::Impl::Serve(ParameterServer* self) {
  push_handlers = std::make_unique<ThreadPool>(PushHandlerThreads());
  pull_handlers = std::make_unique<ThreadPool>(options.max_threads);
  // A spilled tile that cannot be read back has lost a chunk's state:
  // serving on would serve, or apply a step without, that chunk. Stop, so
  // that a restart restores the last snapshot and the job rolls back to it
  // (a container's restart policy restarts it: docs/OPERATIONS.md).
  shard->set_lost_state_sink([this, self](const absl::Status& why) {
    Fail(self, absl::DataLossError(absl::StrCat(
                   "lost a chunk's state: ", why.message(),
                   "; restart the server to restore its last snapshot")));
  });
  replicas =
      std::make_unique<ReplicaForwarder>(options.shard, options.security);
  catch_up = std::make_unique<ReplicaCatchUp>(shard.get(), replicas.get(),
                                              options.security);
  // A failing spill disk (an I/O error, not a full one) under a primary
  // with backups: stop, and a backup, which holds every update this one
  // acknowledged, takes over (nothing rolls back) rather than serve on a
  // disk that fails. A backup, or a server alone, serves on from RAM (the
  // tiles that cannot be spilled stay there): stopping a backup would
  // leave its slot one copy fewer, and its primary may be the one that
  // just died.
  shard->set_disk_error_sink([this, self](const absl::Status& why) {
    if (replicas->forwarding()) {
      Fail(self, absl::UnavailableError(absl::StrCat(
                     "the spill disk failed (", why.message(),
                     "); a replica of slot ", options.shard, " serves on")));
    }
  });
  bulk = MakeBulkSessions(options);
  service = NewParameterServerService(shard.get(), &shm, bulk.get(), self,
                                      replicas.get(), catch_up.get(),
                                      push_handlers.get(), pull_handlers.get(),
                                      &metrics, options.security.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address,
                           options.security->ServerCredentials(), &port);
  // A request carries at most one chunk's payload (ShardOptions'
  // max_chunk_bytes) and a small header: anything larger is refused by
  // gRPC (RESOURCE_EXHAUSTED) before it is read into memory.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(ShardOptions().max_chunk_bytes + (8 << 20)));
  builder.SetMaxSendMessageSize(-1);
  grpc::ResourceQuota quota("strata-server");
  quota.SetMaxThreads(options.max_threads);
  builder.SetResourceQuota(quota);
  builder.RegisterService(service.get());
  EnableHealthService();
  server = builder.BuildAndStart();
  if (!server || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address));
  }
  address = options.advertise_address.empty() ? absl::StrCat("127.0.0.1:", port)
                                              : options.advertise_address;
  snapshots = std::make_unique<SnapshotKeeper>(data_dir.get(), shard.get(),
                                               options.keep_snapshots);
  shard->set_snapshot_sink([this](uint64_t generation, int64_t step,
                                  std::unique_ptr<ChunkTier> capture) {
    snapshots->Queue(generation, step, std::move(capture));
  });
  return absl::OkStatus();
}

absl::Status ParameterServer::Impl::JoinJob(ParameterServer* self,
                                            const Consistency& consistency) {
  SchedulerClientOptions so;
  so.scheduler_address = options.scheduler_address;
  so.role = v1::ROLE_SERVER;
  so.security = options.security;
  so.address = address;
  so.metrics_address = options.metrics_address;
  so.shard = options.shard;
  so.clock = options.clock;
  if (data_dir) so.data_dir_id = data_dir->id();
  so.snapshots = snapshots->Held();
  so.on_refused = [this, self](const absl::Status& s) { Fail(self, s); };
  STRATA_ASSIGN_OR_RETURN(scheduler, SchedulerClient::Connect(so));
  snapshots->set_on_change([sc = scheduler.get()](std::vector<int64_t> held) {
    sc->SetSnapshots(std::move(held));
  });
  snapshots->set_protect(
      [sc = scheduler.get()] { return sc->common_snapshot(); });
  const v1::View view = scheduler->view();
  if (!view.consistency_auto().empty()) {
    // The scheduler switches an auto job's consistency live; its servers
    // follow the view (Shard::UpdateView).
    if (options.consistency.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the job runs '", view.consistency_auto(),
          "': its servers take the consistency from the scheduler's view, "
          "so start this one without --consistency"));
    }
  } else if (!view.consistency().empty() &&
             view.consistency() != consistency.ToString()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this server runs '", consistency.ToString(),
                     "' but the job runs '", view.consistency(), "'"));
  }
  // The sink first: a step closed as soon as the view arrives is reported.
  reporter = std::make_unique<LedgerReporter>(scheduler.get(), options.shard);
  shard->set_applied_sink(
      [r = reporter.get()](const v1::AppliedReport& a) { r->Add(a); });
  scheduler->AddViewListener(
      [this, self, sc = scheduler.get()](const v1::View& v) {
        OnView(self, v, sc->member_id());
      });
  OnView(self, scheduler->view(), scheduler->member_id());
  return self->fatal();
}

int ParameterServer::port() const { return impl_->port; }
Metrics& ParameterServer::metrics() { return impl_->metrics; }
std::string ParameterServer::address() const { return impl_->address; }
Shard& ParameterServer::shard() { return *impl_->shard; }
int64_t ParameterServer::restored_step() const { return impl_->restored_step; }

int64_t ParameterServer::state_step() const { return impl_->state_step; }

absl::StatusOr<std::string> ParameterServer::SnapshotNow(int64_t step) {
  const uint64_t generation = impl_->shard->generation();
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ChunkTier> capture,
                          impl_->shard->CaptureAll());
  return impl_->snapshots->Write(step, *capture, generation);
}

void ParameterServer::FlushSnapshots() {
  if (impl_->snapshots) impl_->snapshots->Flush();
}

void ParameterServer::Shutdown() {
  Impl& me = *impl_;
  // Held throughout: a second caller (the destructor after a signal-driven
  // shutdown) returns only once the first has finished.
  absl::MutexLock shutdown_lock(&me.shutdown_mu);
  if (me.shut_down) return;
  me.shut_down = true;
  {
    absl::MutexLock lock(&me.fatal_mu);
    me.stopping = true;
  }
  // No snapshot news for a scheduler client about to go.
  if (me.snapshots) {
    me.snapshots->set_on_change(nullptr);
    me.snapshots->set_protect(nullptr);
  }
  if (me.reporter) {
    // What the shard applied reaches the ledger before we leave.
    me.reporter->Flush(absl::Seconds(2));
    me.shard->set_applied_sink(nullptr);
    me.reporter.reset();
  }
  me.shard->set_lost_state_sink(nullptr);
  me.shard->set_disk_error_sink(nullptr);
  // A catch-up's state stream and the forwards under way end now: the
  // view thread the scheduler client joins may wait for a paused change.
  if (me.replicas) me.replicas->CancelAll();
  if (me.catch_up) me.catch_up->Stop();  // it calls the scheduler
  me.scheduler.reset();                  // leaves the cluster
  // Wake every gate and view waiter first: gRPC's Shutdown waits for every
  // call in flight to finish, and no push will come to release a pull.
  me.shard->Cancel();
  if (me.server)
    me.server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  // Run what was queued: every reactor gets finished.
  me.pull_handlers.reset();
  me.push_handlers.reset();
  FlushSnapshots();
}

void ParameterServer::Wait() {
  if (impl_->server) impl_->server->Wait();
}

}  // namespace strata
