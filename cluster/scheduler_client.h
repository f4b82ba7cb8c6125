// A member's connection to the scheduler: registers, keeps the
// lease alive and the cluster view current, and wraps the rendezvous KV.
//
// Usage:
//   SchedulerClientOptions options;
//   options.scheduler_address = "sched:7070";
//   options.role = v1::ROLE_WORKER;
//   STRATA_ASSIGN_OR_RETURN(auto client, SchedulerClient::Connect(options));
//   client->AddViewListener([](const v1::View& v) { ... });
//   client->SetProgress(step, samples_per_sec);
#ifndef STRATA_CLUSTER_SCHEDULER_CLIENT_H_
#define STRATA_CLUSTER_SCHEDULER_CLIENT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/kv_revision.h"  // KvCurrentRevision, for callers
#include "security/tls.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/scheduler.grpc.pb.h"

namespace strata {

struct SchedulerClientOptions {
  // host:port of the scheduler.
  std::string scheduler_address;
  // What this member is. Servers must give `address` and `shard`.
  v1::Role role = v1::ROLE_WORKER;
  // host:port this member serves on: servers' ParameterServer; workers'
  // gRPC health, or "" when they serve none.
  std::string address;
  std::string metrics_address;  // its Prometheus endpoint; "" = none
  int shard = -1;               // servers: the shard slot to serve
  uint32_t devices = 0;
  double capacity = 1.0;
  // Time between heartbeats; 0 means a fifth of the lease the scheduler
  // grants (four may be late or lost before the lease runs out).
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // How long Connect waits for the scheduler, and the deadline of each RPC.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Time source for lease bookkeeping (how long since the last renewal, in
  // logs); not owned, must outlive the client. Waits between heartbeats use
  // real time.
  Clock* clock = Clock::Real();
  // Called (from the heartbeat thread) when the lease was lost and the
  // client registered again under a new member id: (old id, new id).
  std::function<void(uint64_t, uint64_t)> on_reregistered;
  // Called (from the heartbeat thread) when the lease was lost and the
  // scheduler refused to register this member again with an answer that
  // retrying cannot change (e.g. FAILED_PRECONDITION: a server restarted
  // on the same data directory took the slot). The client stops
  // heartbeating; the member should stop.
  std::function<void(const absl::Status&)> on_refused;
  // Servers: their data directory's id (DataDir::id) and the snapshot
  // steps held at registration (SetSnapshots updates them).
  std::string data_dir_id;
  std::vector<int64_t> snapshots;
  // Test-only: when false the destructor does not send Leave, so the
  // scheduler sees the member vanish by lease expiry (as after a crash).
  bool leave_on_destroy = true;
  // TLS credentials for the channel (security/tls.h); plaintext by default.
  std::shared_ptr<const Security> security = Security::Plaintext();
};

// A registered member of the cluster. Two background threads run until
// destruction: one heartbeats (retrying with backoff while the scheduler is
// unavailable, and registering again if the lease was lost; the member id
// then changes, see SchedulerClientOptions::on_reregistered), one watches the
// view (reconnecting after errors, e.g. a scheduler restart). Thread-safe.
class SchedulerClient {
 public:
  // Registers with the scheduler and starts the background threads. Errors:
  // DEADLINE_EXCEEDED/UNAVAILABLE if the scheduler cannot be reached within
  // connect_timeout; the scheduler's answer to Register otherwise (e.g.
  // INVALID_ARGUMENT, FAILED_PRECONDITION for a taken shard slot).
  static absl::StatusOr<std::unique_ptr<SchedulerClient>> Connect(
      SchedulerClientOptions options);

  // Stops the threads and leaves the cluster (best effort, unless
  // leave_on_destroy is false).
  ~SchedulerClient();

  SchedulerClient(const SchedulerClient&) = delete;
  SchedulerClient& operator=(const SchedulerClient&) = delete;

  // The current member id (changes only after a lost lease).
  uint64_t member_id() const;

  // The latest view known.
  v1::View view() const;
  // The address of the server holding shard slot `slot` in the latest
  // view, empty if none: view()'s, without copying the view (the client
  // asks it for every request it sends).
  std::string ShardAddress(int slot) const;

  // Blocks until pred(view()) holds, then returns that view. `pred` runs
  // under the client's lock: it must not call back into the client. Errors:
  // DEADLINE_EXCEEDED after `timeout`; CANCELLED if the client is closing.
  absl::StatusOr<v1::View> WaitForView(
      std::function<bool(const v1::View&)> pred, absl::Duration timeout);
  // As WaitForView, with `pred` also given this member's id as it is then
  // (it changes when the client registers again after a lost lease).
  absl::StatusOr<v1::View> WaitForMemberView(
      std::function<bool(const v1::View&, uint64_t member_id)> pred,
      absl::Duration timeout);

  // Records the member's step and speed; sent with the next heartbeat.
  void SetProgress(int64_t clock, double samples_per_sec);
  // Records a step a worker finished (scheduler/step_times.h): its
  // samples, its compute seconds, its wait for the step's weights and the
  // seconds of that wait its processors sat idle (StepTiming.idle_s;
  // nullopt: not measured). Sent with the next heartbeat that gets through
  // (the newest 64 kept); seconds that the scheduler would refuse (not
  // finite, negative, over a day) are clamped, idle_s to wait_s, and a
  // step without samples is not recorded.
  void NoteStep(int64_t step, uint64_t samples, double compute_s, double wait_s,
                std::optional<double> idle_s = std::nullopt);
  // Workers: the path their payloads take to each slot (PsClient::
  // WirePaths); sent with the next heartbeat.
  void SetWire(const v1::WirePaths& wire);
  // Servers: the snapshot steps held now; sent with the next heartbeat.
  void SetSnapshots(std::vector<int64_t> steps);
  // Servers: the newest snapshot step every server holding snapshots was
  // known to hold at the last heartbeat (HeartbeatResponse.common_snapshot),
  // or -1: prune none at or after it.
  int64_t common_snapshot() const;

  // Adds `cb`, called with each newer view (rising epochs) from the client's
  // threads, never under its lock. Callbacks must not block for long, and
  // whatever they use must outlive this client (they run until it is
  // destroyed).
  void AddViewListener(std::function<void(const v1::View&)> cb);

  // Sets key=value. Errors: as the scheduler answers (INVALID_ARGUMENT for an
  // empty key, UNAVAILABLE when unreachable).
  absl::Status KvPut(const std::string& key, const std::string& value);

  // Sets key=value only if its revision is `expected_revision` (0: the key
  // must not exist); returns the new revision. Errors: FAILED_PRECONDITION
  // on a mismatch, with the current revision readable by KvCurrentRevision.
  absl::StatusOr<uint64_t> KvCompareAndSet(const std::string& key,
                                           const std::string& value,
                                           uint64_t expected_revision);

  // Gets a key, waiting up to `wait` for it to appear. Errors: NOT_FOUND
  // (wait 0, absent), DEADLINE_EXCEEDED (did not appear in time).
  absl::StatusOr<std::string> KvGet(const std::string& key,
                                    absl::Duration wait);

  // Deletes the keys k with begin <= k < end (byte order); returns how
  // many. Errors: as the scheduler answers.
  absl::StatusOr<uint64_t> KvDeleteRange(const std::string& begin,
                                         const std::string& end);

  // The data ledger (ledger.proto), as this member: its work for `step` of
  // `job` (and for `ahead` steps after it: LeaseWorkRequest.ahead), the
  // servers' reports, and every applied record. Errors as the scheduler
  // answers (scheduler.proto).
  // `timeout`: the call's deadline (zero: connect_timeout).
  absl::StatusOr<v1::LeaseWorkResponse> LeaseWork(
      int64_t step, const v1::LedgerJob& job, int ahead = 0,
      absl::Duration timeout = absl::ZeroDuration());
  absl::StatusOr<v1::ReportAppliedResponse> ReportApplied(
      const std::vector<v1::AppliedReport>& reports);
  absl::StatusOr<std::vector<v1::LedgerRecord>> ExportLedger();

  // Leaves the cluster now and stops heartbeating (the view keeps being
  // watched). A lease that already ran out is logged, not an error; other
  // errors as the scheduler answers.
  absl::Status Leave();

  // Servers joining their slot: this member caught up from the slot's
  // primary `primary` (scheduler.proto CaughtUp). Errors as it answers.
  absl::Status CaughtUp(uint64_t primary);

 private:
  explicit SchedulerClient(SchedulerClientOptions options);
  absl::Status Register();
  void HeartbeatLoop();
  absl::Status HeartbeatOnce();
  absl::Duration HeartbeatInterval() const;
  // Time since the lease was last renewed, by options_.clock.
  absl::Duration SinceRenewal() const;
  void WatchLoop();
  // One WatchView stream until it ends; sets `got_any` if it gave a view.
  absl::Status WatchOnce(bool& got_any);
  // Adopts `view` if newer (or `force`), then wakes waiters and listeners.
  void OfferView(const v1::View& view, bool force);
  // Sleeps up to `d` or until closing; returns false when closing.
  bool SleepUnlessClosing(absl::Duration d);
  std::unique_ptr<grpc::ClientContext> NewContext(absl::Duration timeout) const;

  const SchedulerClientOptions options_;
  std::unique_ptr<v1::Scheduler::Stub> stub_;
  std::thread heartbeat_thread_;
  std::thread watch_thread_;

  mutable absl::Mutex mu_;
  uint64_t member_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t first_id_ ABSL_GUARDED_BY(mu_) = 0;  // of the first registration
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration lease_ ABSL_GUARDED_BY(mu_);
  absl::Time last_renewed_ ABSL_GUARDED_BY(mu_);  // options_.clock time
  v1::View view_ ABSL_GUARDED_BY(mu_);
  int64_t progress_clock_ ABSL_GUARDED_BY(mu_) = 0;
  double samples_per_sec_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<v1::StepTiming> steps_ ABSL_GUARDED_BY(mu_);  // not yet sent
  std::vector<int64_t> snapshots_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::WirePaths> wire_ ABSL_GUARDED_BY(mu_);
  int64_t common_snapshot_ ABSL_GUARDED_BY(mu_) = -1;
  bool left_ ABSL_GUARDED_BY(mu_) = false;     // Leave() was called
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // the destructor runs
  grpc::ClientContext* watch_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;

  // Serializes listener calls so each sees views in rising epoch order.
  absl::Mutex listeners_mu_;
  std::vector<std::function<void(const v1::View&)>> listeners_
      ABSL_GUARDED_BY(listeners_mu_);
};

}  // namespace strata

#endif  // STRATA_CLUSTER_SCHEDULER_CLIENT_H_
