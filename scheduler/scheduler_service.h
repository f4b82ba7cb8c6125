// The gRPC face of the scheduler: strata.v1.Scheduler handlers over a
// Membership, a KvStore and a Ledger. The only place in scheduler/ that sees
// grpc::Status. Private to scheduler/.
#ifndef STRATA_SCHEDULER_SCHEDULER_SERVICE_H_
#define STRATA_SCHEDULER_SCHEDULER_SERVICE_H_

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "scheduler/kv_store.h"
#include "scheduler/ledger.h"
#include "scheduler/membership.h"
#include "security/tls.h"
#include "strata/v1/scheduler.grpc.pb.h"

namespace strata::scheduler_internal {

// Sync-API service. Blocking calls (WatchView, KvGet with a wait) poll their
// wait in short slices so that a cancelled call or a closed Membership /
// KvStore ends them promptly. Thread-safe; does not own its parts.
//
// Who may call what, under TLS (security/tls.h; everyone under plaintext):
//   Register                      worker, server (as themselves), or any
//                                 role as a client (reads the view)
//   Heartbeat, Leave, CaughtUp    a member of the same role as the member
//                                 named (a worker cannot remove a server)
//   GetView, WatchView, ExportLedger   any role (the scheduler's own
//                                 certificate: `strata status` run in its
//                                 container)
//   KvPut, KvGet, KvDeleteRange   worker, server (rendezvous)
//   LeaseWork                     worker
//   ReportApplied                 server
class SchedulerService final : public v1::Scheduler::Service {
 public:
  SchedulerService(Membership* membership, KvStore* kv, Ledger* ledger,
                   const Security* security)
      : membership_(membership),
        kv_(kv),
        ledger_(ledger),
        security_(security) {}

  grpc::Status Register(grpc::ServerContext* ctx,
                        const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx,
                         const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* req,
                     v1::LeaveResponse* resp) override;
  grpc::Status CaughtUp(grpc::ServerContext* ctx,
                        const v1::CaughtUpRequest* req,
                        v1::CaughtUpResponse* resp) override;
  grpc::Status GetView(grpc::ServerContext* ctx, const v1::GetViewRequest* req,
                       v1::View* resp) override;
  grpc::Status WatchView(grpc::ServerContext* ctx,
                         const v1::WatchViewRequest* req,
                         grpc::ServerWriter<v1::View>* writer) override;
  grpc::Status KvPut(grpc::ServerContext* ctx, const v1::KvPutRequest* req,
                     v1::KvPutResponse* resp) override;
  grpc::Status KvGet(grpc::ServerContext* ctx, const v1::KvGetRequest* req,
                     v1::KvGetResponse* resp) override;
  grpc::Status KvDeleteRange(grpc::ServerContext* ctx,
                             const v1::KvDeleteRangeRequest* req,
                             v1::KvDeleteRangeResponse* resp) override;
  grpc::Status LeaseWork(grpc::ServerContext* ctx,
                         const v1::LeaseWorkRequest* req,
                         v1::LeaseWorkResponse* resp) override;
  grpc::Status ReportApplied(grpc::ServerContext* ctx,
                             const v1::ReportAppliedRequest* req,
                             v1::ReportAppliedResponse* resp) override;
  grpc::Status ExportLedger(
      grpc::ServerContext* ctx, const v1::ExportLedgerRequest* req,
      grpc::ServerWriter<v1::LedgerRecord>* writer) override;

 private:
  // PERMISSION_DENIED unless the caller's certificate may act for a member
  // of the role `req_role` (Register) or for member `member_id`.
  absl::Status AllowRegister(const grpc::ServerContext& ctx,
                             v1::Role req_role) const;
  // Whether a server of `view` that is not catching up serves `slot`.
  static bool SlotIsServed(int slot, const v1::View& view);
  // Whether a server of `view` is joining `slot`, catching up.
  static bool SlotHasJoiners(int slot, const v1::View& view);
  absl::Status AllowFor(const grpc::ServerContext& ctx,
                        absl::string_view method, uint64_t member_id) const;

  Membership* const membership_;
  KvStore* const kv_;
  Ledger* const ledger_;
  const Security* const security_;
  // A registration that rolls the job back changes the view and then the
  // ledger: reports (which check the view's generation) wait for both.
  absl::Mutex rollback_mu_;
};

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_SCHEDULER_SERVICE_H_
