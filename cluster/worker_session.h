// Joining the cluster as a training worker: the steps every trainer takes
// before its first step.
#ifndef STRATA_CLUSTER_WORKER_SESSION_H_
#define STRATA_CLUSTER_WORKER_SESSION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/scheduler_client.h"
#include "common/consistency.h"

namespace strata {

// A registered worker and the view it starts from.
struct WorkerSession {
  std::unique_ptr<SchedulerClient> scheduler;
  v1::View view;            // the first view with at least min_workers workers
  Consistency consistency;  // the job's (bsp when the view names none)
  int rank = 0;     // position among the view's workers (common/work_share.h)
  int workers = 0;  // live workers in `view`
};

// Registers with the scheduler at `scheduler_address` as a worker and waits
// up to `timeout` until at least `min_workers` workers are live. Errors:
// those of SchedulerClient::Connect; DEADLINE_EXCEEDED when the workers do
// not come; INVALID_ARGUMENT for a view with a malformed consistency.
absl::StatusOr<WorkerSession> JoinAsWorker(const std::string& scheduler_address,
                                           int min_workers,
                                           absl::Duration timeout);

}  // namespace strata

#endif  // STRATA_CLUSTER_WORKER_SESSION_H_
