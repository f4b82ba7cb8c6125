#include "scheduler/scheduler.h"

#include <grpcpp/grpcpp.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/consistency.h"
#include "common/status.h"
#include "rpc/health.h"
#include "scheduler/consistency_switcher.h"
#include "scheduler/kv_store.h"
#include "scheduler/ledger.h"
#include "scheduler/membership.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/state_store.h"
#include "spdlog/spdlog.h"

namespace strata {
namespace {

using scheduler_internal::KvStore;
using scheduler_internal::Ledger;
using scheduler_internal::Membership;
using scheduler_internal::MembershipOptions;
using scheduler_internal::PersistedState;
using scheduler_internal::SchedulerService;
using scheduler_internal::StateStore;

// How long Shutdown lets in-flight calls finish before cancelling them.
constexpr absl::Duration kShutdownGrace = absl::Seconds(1);

absl::Status ValidateOptions(const SchedulerOptions& o) {
  if (o.num_shards <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: num_shards must be > 0, got ", o.num_shards));
  }
  if (o.replicas < 1 || o.replicas > kMaxReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: replicas must be in [1, ", kMaxReplicas,
                     "], got ", o.replicas));
  }
  if (o.lease <= absl::ZeroDuration() ||
      o.lease_check_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "scheduler: lease and lease_check_interval must be > 0");
  }
  if (o.clock == nullptr) {
    return absl::InvalidArgumentError("scheduler: clock must be set");
  }
  if (o.listen_address.empty()) {
    return absl::InvalidArgumentError("scheduler: listen_address is empty");
  }
  if (o.automatic.has_value()) {
    if (o.consistency.mode != Consistency::kBsp) {
      return absl::InvalidArgumentError(
          "scheduler: --consistency auto starts the job in bsp");
    }
    if (o.automatic->max_staleness < 1 ||
        o.automatic->max_staleness > kMaxStaleness) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scheduler: auto's max_staleness ", o.automatic->max_staleness,
          " is not in [1, ", kMaxStaleness, "]"));
    }
    if (o.resume_step >= 0) {
      return absl::InvalidArgumentError(
          "scheduler: resuming at a step is for BSP jobs, and an auto job "
          "may have switched from BSP");
    }
  }
  return ValidateConsistency(o.consistency);
}

// The address clients dial: the listen host, or loopback for a wildcard.
std::string DialAddress(const std::string& listen_address, int port) {
  std::string host = listen_address.substr(0, listen_address.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    host = "127.0.0.1";
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Start(
    SchedulerOptions options) {
  STRATA_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<Scheduler> s(new Scheduler());
  STRATA_RETURN_IF_ERROR(s->Init(std::move(options)));
  return s;
}

absl::Status Scheduler::Init(SchedulerOptions options) {
  const Consistency mode = options.consistency;
  if (options.resume_step >= 0 && mode.mode != Consistency::kBsp) {
    return absl::InvalidArgumentError(
        "scheduler: resuming at a step needs a BSP job (only BSP servers "
        "take consistent snapshots)");
  }
  STRATA_ASSIGN_OR_RETURN(store_, StateStore::Open(options.data_dir));
  STRATA_ASSIGN_OR_RETURN(PersistedState state, store_->Load());
  ledger_ = std::make_unique<Ledger>(
      mode, store_.get(), std::move(state.ledger),
      std::move(state.ledger_applied), std::move(state.ledger_splits));
  if (options.resume_step >= 0) {
    // Everyone of the stopped job is gone, their slots free at once; the
    // ledger forgets the steps after resume_step. One write.
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Ledger::PendingRollback> pending,
                            ledger_->BeginRollBack());
    scheduler_internal::StateBatch batch;
    for (const v1::Member& m : state.members) batch.DeleteMember(m.id());
    pending->To(options.resume_step, batch);
    STRATA_RETURN_IF_ERROR(store_->Write(batch));
    pending->Adopt();
    spdlog::info("scheduler: resuming at step {}: {} old member(s) dropped",
                 options.resume_step, state.members.size());
    state.members.clear();
  }
  membership_ = std::make_unique<Membership>(
      MembershipOptions{options.num_shards, options.replicas,
                        options.consistency, options.lease, options.clock,
                        store_.get()},
      state);
  automatic_ = options.automatic;
  if (automatic_.has_value()) {
    absl::MutexLock lock(&switch_mu_);
    switcher_ = std::make_unique<scheduler_internal::ConsistencySwitcher>();
    ledger_->LimitAhead(scheduler_internal::kAutoLeaseAhead);
  }
  // A job that switched before a restart goes on in its mode.
  STRATA_RETURN_IF_ERROR(PublishConsistency());
  kv_ = std::make_unique<KvStore>(store_.get(), std::move(state.kv));
  service_ = std::make_unique<SchedulerService>(
      membership_.get(), kv_.get(), ledger_.get(), options.security.get());
  security_ = options.security;

  EnableHealthService();
  grpc::ServerBuilder builder;
  // Two schedulers must never share a port (SO_REUSEPORT would allow it).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen_address,
                           options.security->ServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("scheduler: cannot listen on ", options.listen_address));
  }
  address_ = DialAddress(options.listen_address, port_);
  lease_check_interval_ = options.lease_check_interval;
  lease_thread_ = std::thread([this] { LeaseLoop(); });
  AddMetrics();
  SetServing(server_.get(), true);
  spdlog::info(
      "scheduler: serving on {} ({}; {} shard slots, {}, data_dir '{}', {} "
      "member(s), epoch {})",
      address_, options.security->tls() ? "mutual TLS" : "plaintext",
      options.num_shards, options.consistency.ToString(), options.data_dir,
      state.members.size(), membership_->View().epoch());
  return absl::OkStatus();
}

Scheduler::~Scheduler() { Shutdown(); }

void Scheduler::AddMetrics() {
  Membership* m = membership_.get();
  metrics_.AddGaugeFn("strata_view_epoch", "The cluster view's epoch",
                      [m] { return static_cast<double>(m->View().epoch()); });
  metrics_.AddGaugeFn(
      "strata_members", "Live members in the view",
      [m] { return static_cast<double>(m->View().workers_size()); },
      {{"role", "worker"}});
  metrics_.AddGaugeFn(
      "strata_members", "Live members in the view",
      [m] { return static_cast<double>(m->View().servers_size()); },
      {{"role", "server"}});
  metrics_.AddGaugeFn(
      "strata_job_generation", "Whole-job rollbacks so far",
      [m] { return static_cast<double>(m->View().generation()); });
  metrics_.AddGaugeFn(
      "strata_consistency_switches",
      "Live switches of the job's consistency the view lists "
      "(--consistency auto; the last 32)",
      [m] {
        return static_cast<double>(m->View().consistency_switches_size());
      });
  metrics_.AddCounterFn("strata_lease_expiries_total",
                        "Members removed because their lease ran out", [m] {
                          return static_cast<double>(m->lease_expiries());
                        });
}

v1::View Scheduler::CurrentView() const { return membership_->View(); }

void Scheduler::CheckLeasesNow() {
  membership_->ExpireLeases();
  // Work leased to members that left goes back to the queue.
  if (absl::Status s = ledger_->Sweep(membership_->View()); !s.ok()) {
    spdlog::error("scheduler: ledger sweep failed: {}", s.ToString());
  }
}

void Scheduler::LeaseLoop() {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                               lease_check_interval_)) {
    mu_.Unlock();
    CheckLeasesNow();
    AdvanceConsistency();
    mu_.Lock();
  }
}

absl::Status Scheduler::PublishConsistency() {
  const v1::LedgerState s = ledger_->State();
  scheduler_internal::ConsistencyState state;
  state.now = ledger_->mode();
  state.automatic = automatic_;
  if (s.has_pending_switch()) state.pending = s.pending_switch();
  state.switches.assign(s.switches().begin(), s.switches().end());
  state.schedule_offset = s.schedule_offset();
  return membership_->SetConsistency(std::move(state));
}

absl::StatusOr<v1::ConsistencySwitch> Scheduler::SwitchConsistency(
    const Consistency& to, std::string reason) {
  absl::MutexLock lock(&switch_mu_);
  if (to.mode == Consistency::kAsp && automatic_.has_value() &&
      !automatic_->allow_asp) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job runs ", automatic_->ToString(),
                     ": SSP is the loosest mode it may switch to"));
  }
  STRATA_ASSIGN_OR_RETURN(
      v1::ConsistencySwitch sw,
      ledger_->BeginSwitch(to, std::move(reason),
                           absl::ToUnixMillis(absl::Now())));
  // The ledger refuses leases until the view shows its mode.
  STRATA_RETURN_IF_ERROR(PublishConsistency());
  return sw;
}

void Scheduler::AdvanceConsistency() {
  std::optional<scheduler_internal::SwitchDecision> next;
  {
    absl::MutexLock lock(&switch_mu_);
    absl::StatusOr<std::optional<v1::ConsistencySwitch>> done =
        ledger_->MaybeCompleteSwitch();
    absl::Status s = done.status();
    // Also a view left behind by a failed write: the ledger refuses leases
    // until the view shows its mode.
    if (s.ok() && (done->has_value() || membership_->View().consistency() !=
                                            ledger_->mode().ToString())) {
      s = PublishConsistency();
    }
    if (!s.ok()) {
      spdlog::error("scheduler: consistency switch: {}", s.ToString());
    }
    if (switcher_ == nullptr) return;
    next = switcher_->Decide(membership_->View());
  }
  if (!next.has_value()) return;
  absl::StatusOr<v1::ConsistencySwitch> sw =
      SwitchConsistency(next->to, next->reason);
  if (!sw.ok()) {
    spdlog::warn("scheduler: no switch to {}: {}", next->to.ToString(),
                 sw.status().ToString());
    absl::MutexLock lock(&switch_mu_);
    if (switcher_ != nullptr) switcher_->Refused(membership_->View());
  }
}

void Scheduler::Shutdown() {
  absl::MutexLock call_lock(&shutdown_call_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  // Wake blocked calls first so the server's shutdown need not cancel them.
  if (membership_ != nullptr) membership_->Close();
  if (kv_ != nullptr) kv_->Close();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(kShutdownGrace));
    server_->Wait();
  }
  if (lease_thread_.joinable()) lease_thread_.join();
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  spdlog::info("scheduler: {} shut down", address_);
}

void Scheduler::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&stopped_));
}

}  // namespace strata
