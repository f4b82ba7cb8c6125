// The parameter-server process's core: a Shard behind a gRPC service, joined
// to the cluster through the scheduler, with snapshots in a data directory.
#ifndef STRATA_SERVER_PARAMETER_SERVER_H_
#define STRATA_SERVER_PARAMETER_SERVER_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/consistency.h"
#include "common/metrics.h"
#include "security/tls.h"
#include "transport/wire_kind.h"

namespace strata {

class Shard;

struct ServerOptions {
  std::string listen_address = "127.0.0.1:0";  // port 0: pick a free one
  // Address other members dial; "" = 127.0.0.1:<bound port>.
  std::string advertise_address;
  // "" = standalone: no scheduler; the view is set by tests (SetWorkers).
  std::string scheduler_address;
  int shard = 0;  // the shard slot this server serves
  // Where snapshots live; "" = none. A snapshot found here at start is
  // loaded: the newest, or the one of restore_step when that is >= 0 (the
  // whole job resumes at a step every server holds; NOT_FOUND if this
  // server does not hold it; its snapshots of later steps are removed).
  // With a scheduler, the directory's id and snapshot steps are sent at
  // registration (a restart on it supersedes the old server at once, and
  // may roll the job back: scheduler/rollback.h) and with heartbeats.
  std::string data_dir;
  int64_t restore_step = -1;
  // Bytes of chunk tiles (weights and optimizer state) held in RAM; the
  // rest spill to <data_dir>/spill (storage/spill_store.h). 0 = no budget:
  // everything in RAM. Needs a data_dir.
  uint64_t ram_budget = 0;
  // Tiles read ahead of use, with a budget; -1: the eviction policy's
  // default (SpillOptions::prefetch_depth).
  int prefetch_depth = -1;
  // With a budget: changed cold tiles written out on a thread of their own
  // ahead of their spill (SpillOptions::write_behind).
  bool write_behind = true;
  // With a budget, which tile to spill first (SpillOptions::Eviction):
  // "lru" (least recently used), "farthest" (next use farthest in the
  // learned order), "just_used" (used last), or "auto": just_used (better
  // than lru end to end under BSP, SSP and ASP: docs/BENCHMARKS.md).
  std::string evict = "auto";
  // With a budget: RAM past it for tiles that pulls wait on
  // (SpillOptions::pinned_bytes; 0: none).
  uint64_t pinned_bytes = 32 << 20;
  // With a scheduler, unset means "the job's setting from the view"; a
  // setting that differs from the view's is an error. Without one, unset
  // is BSP.
  std::optional<Consistency> consistency;
  int64_t snapshot_every = 0;  // BSP: automatic snapshot every N steps
  int keep_snapshots = 3;
  absl::Duration max_wait = absl::Seconds(120);  // longest gate wait
  absl::Duration view_wait = absl::Seconds(5);
  int max_threads =
      256;  // pull handler threads (a pull waiting at the gate holds one)
  Clock* clock = Clock::Real();
  // host:port of this server's Prometheus endpoint, registered with the
  // scheduler (`strata status` reads it); "" = none.
  std::string metrics_address;
  // TLS and who may call what (security/tls.h), for the server's own port
  // and its channel to the scheduler; plaintext by default.
  std::shared_ptr<const Security> security = Security::Plaintext();
  // Whether workers may move payloads over the bulk plane (AttachBulk in
  // ps.proto; UCX starts at the first attach): not with kGrpc. Under
  // mutual TLS each session gets a key and its payloads are sealed,
  // unless bulk_insecure. kUcx and kAuto differ on the worker's side only.
  WireKind wire = WireKind::kAuto;
  bool bulk_insecure = false;
  std::string ucx_transports;  // UcxNode::Options::transports
};

// Thread-safe handle to a running server. Destruction shuts it down.
class ParameterServer {
 public:
  // Validates options, opens the data dir (refusing one that is not ours),
  // restores the latest snapshot, starts gRPC and registers with the
  // scheduler. Errors: INVALID_ARGUMENT (bad option), FAILED_PRECONDITION or
  // DATA_LOSS (data dir), UNAVAILABLE (port or scheduler).
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Start(
      ServerOptions options);
  ~ParameterServer();

  int port() const;
  std::string address() const;  // the advertised address
  // The server's Prometheus series (server/server_metrics.h), for a metrics
  // endpoint that must not outlive the server.
  Metrics& metrics();
  Shard& shard();
  // Writes a snapshot of the current state tagged `step`; returns its path.
  absl::StatusOr<std::string> SnapshotNow(int64_t step);
  // Step of the snapshot restored from the data directory at start, or -1.
  int64_t restored_step() const;
  // Step of the snapshot the served state comes from: restored_step(), or
  // the job's rollback step once a view rolled this server back (a restarted
  // server joining a BSP job rolls back to the job's last common snapshot,
  // which may be older than its own newest). -1 for a fresh state.
  int64_t state_step() const;
  // Blocks until automatic snapshots queued so far are written.
  void FlushSnapshots();
  // Why the server stopped itself, or OK: it could not roll back to the
  // job's step (View.generation), or a server restarted on its data
  // directory superseded it. Wait() returns once it has stopped.
  absl::Status fatal() const;
  void Shutdown();  // idempotent
  void Wait();      // until Shutdown

  struct Impl;

 private:
  explicit ParameterServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata

#endif  // STRATA_SERVER_PARAMETER_SERVER_H_
