// Bringing a server that joins a replicated slot while its job runs up to
// the primary's state (ShardSlot.joining, ps.proto CatchUp). Private to
// server/.
//
// The joiner asks the primary (CatchUp). The primary pauses every change
// (ReplicaForwarder::WhilePaused: the requests under way finish, on every
// backup too, and new ones wait), sends its whole shard state to the
// joiner (Shard::ExportState into the joiner's InstallState), and, once
// the joiner has installed it, forwards every later change to it as to a
// backup; then changes go on. So the joiner holds what the primary held
// at the pause plus every change after it: what a backup holds. The
// joiner then tells the scheduler (CaughtUp), naming the primary it caught
// up from; the scheduler makes it a backup only if that member is still
// the slot's primary (a backup promoted meanwhile never forwarded to it),
// else the joiner stops, and started again it catches up afresh.
//
// The pause is the cost: no push or commit is answered in the slot while
// its state is copied and sent, and the primary's own view changes wait
// for it too (the export holds the shard's view lock, so no sweep or
// rollback runs half way through it). The state stream is tracked with
// the forwards (ReplicaForwarder::Track): a view that drops the joiner, or
// the primary's shutdown, cancels it and so ends the pause
// (docs/BENCHMARKS.md, bench/recovery.sh, bench/catch_up.sh).
#ifndef STRATA_SERVER_REPLICA_CATCH_UP_H_
#define STRATA_SERVER_REPLICA_CATCH_UP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/client_context.h"
#include "security/tls.h"
#include "server/replica_forwarder.h"
#include "server/shard.h"
#include "strata/v1/ps.pb.h"

namespace strata {

class ReplicaCatchUp {
 public:
  // What a joiner calls: the scheduler's CaughtUp for the primary it caught
  // up from, and how it stops for an error it cannot retry.
  struct Joiner {
    std::string address;  // where this server serves
    std::function<absl::Status(uint64_t primary)> caught_up;
    std::function<void(const absl::Status&)> fail;
  };

  // None owned; each must outlive this.
  ReplicaCatchUp(Shard* shard, ReplicaForwarder* replicas,
                 std::shared_ptr<const Security> security);
  ~ReplicaCatchUp();  // stops a catch-up under way (Stop)

  // The primary's side of CatchUp.
  absl::StatusOr<v1::CatchUpResponse> Serve(const v1::CatchUpRequest& req);

  // The joiner's side of InstallState: the parts `read` yields (false at
  // the end), the header first. Errors as ps.proto InstallState's, and
  // Shard::InstallState's.
  using PartReader = absl::FunctionRef<bool(v1::ShardStatePart* part)>;
  absl::StatusOr<uint64_t> Install(PartReader read);
  // Whether this server installed a primary's state.
  bool installed();

  // After each view: when it lists this server as joining its slot and no
  // catch-up is under way, starts one on a thread of its own (retried
  // while the primary answers UNAVAILABLE); a joiner whose slot has no
  // primary left fails (it holds nothing to serve from).
  void OnView(const Joiner& joiner);
  // Ends a catch-up under way (its next retry does not start) and joins it.
  void Stop();

 private:
  // The joiner's thread: CatchUp at the primary, then CaughtUp.
  void Run(Joiner joiner);
  // Sends the state to joining `member` at `address`, inside the pause.
  absl::Status SendState(uint64_t member, const std::string& address,
                         uint64_t self, v1::CatchUpResponse* resp);
  bool Stopping();

  Shard* const shard_;
  ReplicaForwarder* const replicas_;
  const std::shared_ptr<const Security> security_;
  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool caught_up_ ABSL_GUARDED_BY(mu_) = false;  // the scheduler knows
  bool installed_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* call_ ABSL_GUARDED_BY(mu_) = nullptr;  // CatchUp
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_REPLICA_CATCH_UP_H_
