// The Strata scheduler: membership with leases, the cluster
// view and its epoch, the shard map, the data ledger (scheduler/ledger.h)
// and a rendezvous key-value store, served
// over gRPC as strata.v1.Scheduler and kept in RocksDB so a restarted
// scheduler carries on where it stopped.
//
// Usage:
//   SchedulerOptions options;
//   options.data_dir = "/var/lib/strata/scheduler";
//   options.num_shards = 4;
//   STRATA_ASSIGN_OR_RETURN(auto scheduler, Scheduler::Start(options));
//   ... scheduler->address() ...
//   scheduler->Wait();  // until another thread calls Shutdown()
#ifndef STRATA_SCHEDULER_SCHEDULER_H_
#define STRATA_SCHEDULER_SCHEDULER_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/consistency.h"
#include "common/metrics.h"
#include "security/tls.h"
#include "strata/v1/common.pb.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace strata {

// How long a member stays in the view without a heartbeat unless told
// otherwise (SchedulerOptions::lease, `strata scheduler --lease_ms`): the
// one default. It trades a quick recovery (a worker killed with SIGKILL
// leaves the view at most a lease plus the check interval after its last
// heartbeat, and the others then redo its BSP step) against fencing a
// member that stalls longer than this (e.g. SIGSTOP): it then registers
// again and redoes its step.
inline constexpr absl::Duration kDefaultLease = absl::Milliseconds(2500);
// The most servers a slot may hold (SchedulerOptions::replicas).
inline constexpr int kMaxReplicas = 3;

namespace scheduler_internal {
class StateStore;
class Membership;
class KvStore;
class Ledger;
class SchedulerService;
class ConsistencySwitcher;
}  // namespace scheduler_internal

struct SchedulerOptions {
  // host:port to serve on; port 0 picks a free one (see Scheduler::port()).
  std::string listen_address = "127.0.0.1:0";
  // Directory for the RocksDB state; "" keeps the state in memory only. A
  // non-empty directory must be one a scheduler created before.
  std::string data_dir;
  // Number of shard slots; each server registers into one. Must be > 0.
  int num_shards = 1;
  // Servers per slot (primary and backups, server/replica_forwarder.h):
  // an update a primary acknowledged is on every replica, and the oldest
  // backup takes over when the primary's lease runs out. 1..kMaxReplicas.
  int replicas = 1;
  // The job's consistency, copied into every view (as
  // Consistency::ToString: bsp | ssp:<s> | asp).
  Consistency consistency;
  // --consistency auto[:<s>[:ssp]]: the job starts in `consistency` (BSP) and
  // the scheduler switches it live (scheduler/consistency_switcher.h).
  std::optional<AutoConsistency> automatic;
  // How long a member stays without a heartbeat. Must be > 0.
  absl::Duration lease = kDefaultLease;
  // How often leases are checked against clock->Now(). Must be > 0.
  absl::Duration lease_check_interval = absl::Milliseconds(100);
  // Time source for leases; not owned, must outlive the Scheduler.
  Clock* clock = Clock::Real();
  // >= 0: the job resumes at this step after a stop or crash of everything
  // (`strata local --resume`): members restored from data_dir are dropped
  // (none of them lives), and the data ledger forgets steps from this one
  // on (the servers restore their snapshots of it). BSP only.
  int64_t resume_step = -1;
  // TLS and who may call what (security/tls.h); plaintext by default.
  std::shared_ptr<const Security> security = Security::Plaintext();
};

// A running scheduler: a small handle over the gRPC server, the member table
// and the state store. All methods are thread-safe.
class Scheduler {
 public:
  // Validates `options`, opens the state (restoring members, epoch, member
  // id counter, shard map version and KV, with a full lease for every
  // restored member) and starts serving. Errors: INVALID_ARGUMENT for bad
  // options; FAILED_PRECONDITION for a data_dir that is not a scheduler's;
  // UNAVAILABLE if the address cannot be bound; storage errors.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Start(
      SchedulerOptions options);

  // Shuts down (see Shutdown) and releases everything.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The port actually bound.
  int port() const { return port_; }
  // "host:port" clients can dial: the listen host (127.0.0.1 for a wildcard
  // host) and the bound port.
  std::string address() const { return address_; }

  // The current view.
  v1::View CurrentView() const;

  // Expires leases against clock->Now() at once and hands the ledger's
  // work of departed workers back (for tests driving a SimulatedClock; the
  // scheduler also does it every lease_check_interval).
  void CheckLeasesNow();

  // Switches the job's consistency to `to` (scheduler/ledger.h BeginSwitch:
  // at once from SSP/ASP, at a fence step from BSP) and shows it in the
  // view. --consistency auto calls it by its rule; tests call it directly.
  // Errors: BeginSwitch's.
  absl::StatusOr<v1::ConsistencySwitch> SwitchConsistency(const Consistency& to,
                                                          std::string reason);

  // Stops serving: ends WatchView streams and waiting KV gets, then the gRPC
  // server and the lease thread. Idempotent; safe from any thread except a
  // gRPC handler of this scheduler.
  void Shutdown();

  // Blocks until Shutdown has completed.
  void Wait();

  // The scheduler's Prometheus series (members, epoch, lease expiries), for
  // a metrics endpoint (common/metrics_http.h) that must not outlive it.
  Metrics& metrics() { return metrics_; }

 private:
  Scheduler() = default;
  absl::Status Init(SchedulerOptions options);
  void LeaseLoop();
  void AddMetrics();
  // Completes a pending switch whose fence is reached and, under auto,
  // begins the one the switcher decides.
  void AdvanceConsistency();
  // The ledger's consistency into the view.
  absl::Status PublishConsistency();

  int port_ = 0;
  std::string address_;
  absl::Duration lease_check_interval_;
  std::shared_ptr<const Security> security_;
  std::unique_ptr<scheduler_internal::StateStore> store_;
  std::unique_ptr<scheduler_internal::Membership> membership_;
  std::unique_ptr<scheduler_internal::KvStore> kv_;
  std::unique_ptr<scheduler_internal::Ledger> ledger_;
  std::unique_ptr<scheduler_internal::SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread lease_thread_;
  Metrics metrics_;
  std::optional<AutoConsistency> automatic_;
  // Serializes switches (AdvanceConsistency, SwitchConsistency).
  absl::Mutex switch_mu_;
  std::unique_ptr<scheduler_internal::ConsistencySwitcher> switcher_
      ABSL_GUARDED_BY(switch_mu_);

  absl::Mutex shutdown_call_mu_;  // serializes Shutdown calls
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace strata

#endif  // STRATA_SCHEDULER_SCHEDULER_H_
