#include "scheduler/scheduler_service.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "scheduler/rollback.h"
#include "spdlog/spdlog.h"

namespace strata::scheduler_internal {
namespace {

// How often a blocked call looks whether its client went away.
constexpr absl::Duration kPollSlice = absl::Milliseconds(200);

// The certificate role that acts as a member of role `r`.
std::optional<Role> CertRole(v1::Role r) {
  switch (r) {
    case v1::ROLE_SERVER:
      return Role::kServer;
    case v1::ROLE_WORKER:
      return Role::kWorker;
    case v1::ROLE_CLIENT:
      return Role::kClient;
    default:
      return std::nullopt;
  }
}

constexpr std::initializer_list<Role> kReaders = {
    Role::kWorker, Role::kServer, Role::kClient, Role::kScheduler};

}  // namespace

absl::Status SchedulerService::AllowRegister(const grpc::ServerContext& ctx,
                                             v1::Role req_role) const {
  STRATA_ASSIGN_OR_RETURN(std::optional<Role> caller,
                          security_->CallerRole(ctx));
  // A client registration only reads the view: any member may make one.
  if (!caller || req_role == v1::ROLE_CLIENT) return absl::OkStatus();
  if (CertRole(req_role) == caller) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "a ", RoleName(*caller), "'s certificate may not register as ",
      v1::Role_Name(req_role)));
}

bool SchedulerService::SlotHasJoiners(int slot, const v1::View& view) {
  for (const v1::Member& s : view.servers()) {
    if (s.shard() == slot && s.catching_up()) return true;
  }
  return false;
}

absl::Status SchedulerService::AllowFor(const grpc::ServerContext& ctx,
                                        absl::string_view method,
                                        uint64_t member_id) const {
  STRATA_ASSIGN_OR_RETURN(std::optional<Role> caller,
                          security_->CallerRole(ctx));
  if (!caller) return absl::OkStatus();
  const v1::View view = membership_->View();
  for (const auto* members : {&view.servers(), &view.workers()}) {
    for (const v1::Member& m : *members) {
      if (m.id() != member_id) continue;
      if (CertRole(m.role()) == caller) return absl::OkStatus();
      return absl::PermissionDeniedError(absl::StrCat(
          "a ", RoleName(*caller), " may not call ", method, " for member ",
          member_id, ", a ", v1::Role_Name(m.role())));
    }
  }
  // A client (not in the view) or an unknown id: Membership answers.
  return absl::OkStatus();
}

bool SchedulerService::SlotIsServed(int slot, const v1::View& view) {
  for (const v1::Member& s : view.servers()) {
    if (s.shard() == slot && !s.catching_up()) return true;
  }
  return false;
}

grpc::Status SchedulerService::Register(grpc::ServerContext* ctx,
                                        const v1::RegisterRequest* req,
                                        v1::RegisterResponse* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(AllowRegister(*ctx, req->role()));
  // Every registration takes the lock (they are rare); only a server's first
  // one into a BSP job under way rolls back (RollbackStep). The view's new
  // generation and the ledger's rollback are one write: the ledger stays
  // locked from the state the step is computed from until it adopts it.
  absl::MutexLock lock(&rollback_mu_);
  std::unique_ptr<Ledger::PendingRollback> pending;
  absl::StatusOr<v1::RegisterResponse> r = membership_->Register(
      *req,
      [&](const v1::RegisterRequest& q, const v1::View& after,
          StateBatch& batch) -> absl::StatusOr<std::optional<int64_t>> {
        if (q.role() != v1::ROLE_SERVER) return std::nullopt;
        if (SlotIsServed(q.shard(), after)) {
          // A replica joins a slot that still serves, catching up from its
          // primary: nothing rolls back.
          return std::nullopt;
        }
        if (!ledger_->RollsBack()) {
          // Under SSP/ASP (and after a switch) nothing rolls back: a slot
          // whose servers all died while one was still catching up has
          // lost its state.
          if (SlotHasJoiners(q.shard(), after) && ledger_->State().has_job()) {
            return absl::FailedPreconditionError(absl::StrCat(
                "register: shard slot ", q.shard(),
                " lost its primary before its joining server caught up; "
                "under ",
                ledger_->mode().ToString(),
                " nothing rolls back, so the job cannot go on"));
          }
          return std::nullopt;
        }
        absl::StatusOr<std::unique_ptr<Ledger::PendingRollback>> begun =
            ledger_->BeginRollBack();
        // The job switched since the check above (--consistency auto):
        // nothing rolls back, as under SSP/ASP.
        if (absl::IsUnimplemented(begun.status())) return std::nullopt;
        if (!begun.ok()) return begun.status();
        pending = *std::move(begun);
        std::optional<int64_t> rolled =
            // BeginRollBack holds the ledger (and refuses a job not in
            // BSP): the mode is BSP.
            RollbackStep(q, after, pending->state(), Consistency());
        if (rolled.has_value()) pending->To(*rolled, batch);
        return rolled;
      });
  if (!r.ok()) return ToGrpcStatus(r.status());
  if (pending != nullptr) pending->Adopt();
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Heartbeat(grpc::ServerContext* ctx,
                                         const v1::HeartbeatRequest* req,
                                         v1::HeartbeatResponse* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(
      AllowFor(*ctx, "Scheduler.Heartbeat", req->member_id()));
  absl::StatusOr<v1::HeartbeatResponse> r = membership_->Heartbeat(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Leave(grpc::ServerContext* ctx,
                                     const v1::LeaveRequest* req,
                                     v1::LeaveResponse* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(
      AllowFor(*ctx, "Scheduler.Leave", req->member_id()));
  return ToGrpcStatus(membership_->Leave(req->member_id()));
}

grpc::Status SchedulerService::CaughtUp(grpc::ServerContext* ctx,
                                        const v1::CaughtUpRequest* req,
                                        v1::CaughtUpResponse* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(
      AllowFor(*ctx, "Scheduler.CaughtUp", req->member_id()));
  return ToGrpcStatus(
      membership_->CaughtUp(req->member_id(), req->primary_member_id()));
}

grpc::Status SchedulerService::GetView(grpc::ServerContext* ctx,
                                       const v1::GetViewRequest* req,
                                       v1::View* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(
      security_->Authorize(*ctx, "Scheduler.GetView", kReaders));
  *resp = membership_->View();
  return grpc::Status::OK;
}

// Sends each view with a higher epoch than the last one sent; a slow reader
// simply gets the latest when it catches up. Ends with UNAVAILABLE when the
// scheduler shuts down, so the watcher reconnects.
grpc::Status SchedulerService::WatchView(grpc::ServerContext* ctx,
                                         const v1::WatchViewRequest* req,
                                         grpc::ServerWriter<v1::View>* writer) {
  STRATA_RETURN_GRPC_IF_ERROR(
      security_->Authorize(*ctx, "Scheduler.WatchView", kReaders));
  uint64_t known = req->known_epoch();
  while (!ctx->IsCancelled()) {
    absl::StatusOr<v1::View> view = membership_->AwaitView(known, kPollSlice);
    if (absl::IsDeadlineExceeded(view.status())) continue;
    if (!view.ok()) return ToGrpcStatus(view.status());
    if (!writer->Write(*view)) break;  // the watcher went away
    known = view->epoch();
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
}

grpc::Status SchedulerService::KvPut(grpc::ServerContext* ctx,
                                     const v1::KvPutRequest* req,
                                     v1::KvPutResponse* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(security_->Authorize(
      *ctx, "Scheduler.KvPut", {Role::kWorker, Role::kServer}));
  absl::StatusOr<uint64_t> r =
      kv_->Put(req->key(), req->value(), req->cas(), req->expected_revision());
  if (!r.ok()) {
    if (std::optional<uint64_t> cur = KvCurrentRevision(r.status())) {
      ctx->AddTrailingMetadata(kKvRevisionMetadata, absl::StrCat(*cur));
    }
    return ToGrpcStatus(r.status());
  }
  resp->set_revision(*r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::KvDeleteRange(
    grpc::ServerContext* ctx, const v1::KvDeleteRangeRequest* req,
    v1::KvDeleteRangeResponse* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(security_->Authorize(
      *ctx, "Scheduler.KvDeleteRange", {Role::kWorker, Role::kServer}));
  absl::StatusOr<uint64_t> n = kv_->DeleteRange(req->key(), req->range_end());
  if (!n.ok()) return ToGrpcStatus(n.status());
  resp->set_deleted(*n);
  return grpc::Status::OK;
}

// Waits in slices so a caller that gives up (or a shutdown) frees the thread.
grpc::Status SchedulerService::KvGet(grpc::ServerContext* ctx,
                                     const v1::KvGetRequest* req,
                                     v1::KvGetResponse* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(security_->Authorize(
      *ctx, "Scheduler.KvGet", {Role::kWorker, Role::kServer}));
  if (req->wait_ms() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("kv get: wait_ms must be >= 0, got ", req->wait_ms())));
  }
  const absl::Time deadline = absl::Now() + absl::Milliseconds(req->wait_ms());
  absl::StatusOr<v1::KvGetResponse> r;
  do {
    // A zero slice (wait_ms == 0) answers NOT_FOUND at once.
    r = kv_->Get(req->key(), std::min(deadline - absl::Now(), kPollSlice));
  } while (absl::IsDeadlineExceeded(r.status()) && absl::Now() < deadline &&
           !ctx->IsCancelled());
  if (absl::IsDeadlineExceeded(r.status())) {
    r = absl::DeadlineExceededError(absl::StrCat("kv get: key '", req->key(),
                                                 "' did not appear within ",
                                                 req->wait_ms(), " ms"));
  }
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::LeaseWork(grpc::ServerContext* ctx,
                                         const v1::LeaseWorkRequest* req,
                                         v1::LeaseWorkResponse* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(
      security_->Authorize(*ctx, "Scheduler.LeaseWork", {Role::kWorker}));
  absl::StatusOr<v1::LeaseWorkResponse> r =
      ledger_->Lease(*req, membership_->View());
  // A worker with nothing left to lease is drained in the view, so SSP
  // waits for none of its clocks (it pushes nothing more).
  if (absl::Status d = membership_->SetDrained(
          req->member_id(), ledger_->Drained(req->member_id()));
      !d.ok()) {
    return ToGrpcStatus(d);
  }
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ReportApplied(
    grpc::ServerContext* ctx, const v1::ReportAppliedRequest* req,
    v1::ReportAppliedResponse* resp) {
  STRATA_RETURN_GRPC_IF_ERROR(
      security_->Authorize(*ctx, "Scheduler.ReportApplied", {Role::kServer}));
  absl::ReaderMutexLock lock(&rollback_mu_);
  absl::StatusOr<v1::ReportAppliedResponse> r =
      ledger_->Report(*req, membership_->View());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ExportLedger(
    grpc::ServerContext* ctx, const v1::ExportLedgerRequest* req,
    grpc::ServerWriter<v1::LedgerRecord>* writer) {
  STRATA_RETURN_GRPC_IF_ERROR(
      security_->Authorize(*ctx, "Scheduler.ExportLedger", kReaders));
  for (const v1::LedgerRecord& r : ledger_->Export()) {
    if (!writer->Write(r)) break;  // the reader went away
  }
  return grpc::Status::OK;
}

}  // namespace strata::scheduler_internal
