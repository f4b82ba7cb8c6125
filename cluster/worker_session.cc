#include "cluster/worker_session.h"

#include "common/status.h"
#include "common/work_share.h"

namespace strata {

absl::StatusOr<WorkerSession> JoinAsWorker(const std::string& scheduler_address,
                                           int min_workers,
                                           absl::Duration timeout) {
  WorkerSession s;
  SchedulerClientOptions options;
  options.scheduler_address = scheduler_address;
  options.role = v1::ROLE_WORKER;
  STRATA_ASSIGN_OR_RETURN(s.scheduler, SchedulerClient::Connect(options));
  STRATA_ASSIGN_OR_RETURN(s.view, s.scheduler->WaitForView(
                                      [min_workers](const v1::View& v) {
                                        return v.workers_size() >= min_workers;
                                      },
                                      timeout));
  STRATA_ASSIGN_OR_RETURN(
      s.consistency,
      ParseConsistency(s.view.consistency().empty() ? "bsp"
                                                    : s.view.consistency()));
  STRATA_ASSIGN_OR_RETURN(s.rank, RankOf(s.view, s.scheduler->member_id()));
  s.workers = s.view.workers_size();
  return s;
}

absl::StatusOr<StepView> CurrentStepView(SchedulerClient& scheduler,
                                         absl::Duration timeout) {
  STRATA_ASSIGN_OR_RETURN(v1::View view,
                          scheduler.WaitForMemberView(
                              [](const v1::View& v, uint64_t member) {
                                return RankOf(v, member).ok();
                              },
                              timeout));
  StepView sv;
  sv.epoch = view.epoch();
  sv.member = scheduler.member_id();
  STRATA_ASSIGN_OR_RETURN(sv.rank, RankOf(view, sv.member));
  sv.workers = view.workers_size();
  return sv;
}

bool RedoInNewerView(SchedulerClient& scheduler, const absl::Status& status,
                     const StepView& computed, absl::Duration timeout) {
  if (!absl::IsAborted(status) && !absl::IsFailedPrecondition(status)) {
    return false;
  }
  absl::StatusOr<v1::View> newer = scheduler.WaitForMemberView(
      [&](const v1::View& v, uint64_t member) {
        return v.epoch() > computed.epoch || member != computed.member;
      },
      timeout);
  if (!newer.ok()) return false;
  if (absl::IsAborted(status)) return true;
  // FAILED_PRECONDITION: only a fenced member redoes (any other one is a
  // request that can never succeed).
  return scheduler.member_id() != computed.member ||
         !RankOf(*newer, computed.member).ok();
}

}  // namespace strata
