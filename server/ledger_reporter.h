// Sends a shard's applied reports (server/applied_tracker.h) to the
// scheduler's data ledger, in order, from one thread: what queued up while a
// call was out goes in the next call; a scheduler that is unreachable or
// restarting is retried with backoff until it answers.
#ifndef STRATA_SERVER_LEDGER_REPORTER_H_
#define STRATA_SERVER_LEDGER_REPORTER_H_

#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/scheduler_client.h"
#include "strata/v1/ledger.pb.h"

namespace strata {

class LedgerReporter {
 public:
  // Reports as the server of `slot` through `scheduler` (not owned; must
  // outlive this).
  LedgerReporter(SchedulerClient* scheduler, int slot);
  // Stops the thread; reports not yet sent are dropped (the server is going
  // away, and its restart rolls the job back to a snapshot).
  ~LedgerReporter();

  LedgerReporter(const LedgerReporter&) = delete;
  LedgerReporter& operator=(const LedgerReporter&) = delete;

  // Queues `report` (its slot is set here). Quick: callable under a lock.
  void Add(v1::AppliedReport report);

  // Waits up to `timeout` until everything queued was sent or dropped.
  // Returns whether it was.
  bool Flush(absl::Duration timeout);

 private:
  void Loop();

  SchedulerClient* const scheduler_;
  const int slot_;
  absl::Mutex mu_;
  std::deque<v1::AppliedReport> queue_ ABSL_GUARDED_BY(mu_);
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_SERVER_LEDGER_REPORTER_H_
