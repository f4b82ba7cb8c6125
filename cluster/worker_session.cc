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

}  // namespace strata
