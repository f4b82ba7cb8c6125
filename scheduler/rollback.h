// When a server joining a BSP job under way rolls the whole job back, and to
// which step. Private to scheduler/; the Register handler asks it.
//
// A server's first registration into a slot of a BSP job that has started
// (the ledger's job is fixed, the slot holds chunks) comes with the state of
// its snapshot, not the state the other servers are at. The job goes back
// to the newest step s that
//  - the joining server holds a snapshot of,
//  - every other serving slot of the job holds a snapshot of (as its last
//    registration or heartbeat said), and
//  - the ledger has seen applied (s <= applied_steps), so no sample of a
//    restored step is handed out again;
// step 0, the initial weights, which every server can make from the chunk
// specs, is held by all. A server registering again after a lost lease kept
// its state and never rolls the job back; neither do SSP/ASP jobs (their
// servers snapshot no consistent cut), nor a job whose every step was
// applied (its workers are gone).
#ifndef STRATA_SCHEDULER_ROLLBACK_H_
#define STRATA_SCHEDULER_ROLLBACK_H_

#include <cstdint>
#include <optional>

#include "common/consistency.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/ledger.pb.h"
#include "strata/v1/scheduler.pb.h"

namespace strata::scheduler_internal {

// The step the job rolls back to when `req` registers, with `after` the
// view's other live servers; nullopt when it does not roll back.
std::optional<int64_t> RollbackStep(const v1::RegisterRequest& req,
                                    const v1::View& after,
                                    const v1::LedgerState& ledger,
                                    const Consistency& mode);

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_ROLLBACK_H_
