// A group of ranks that are threads of one process: the Communicator tests
// run every algorithm on, and the transport for tensor and pipeline
// parallelism on CPU threads. Reductions add the ranks' values in rank
// order, so every rank gets bit-identical results run after run.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto comms, MakeInProcGroup(4));
//   // hand comms[r] to the thread that plays rank r
#ifndef STRATA_COLLECTIVE_INPROC_COMMUNICATOR_H_
#define STRATA_COLLECTIVE_INPROC_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/communicator.h"

namespace strata {

// `size` communicators of one new group; element r is rank r. Each may live
// on its own thread; destroying one (or its Abort) makes the others'
// operations fail with UNAVAILABLE, as a peer process's death would.
// Sends are buffered: they complete at once. Errors: INVALID_ARGUMENT for
// size < 1.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeInProcGroup(
    int size, CommunicatorOptions options = {});

}  // namespace strata

#endif  // STRATA_COLLECTIVE_INPROC_COMMUNICATOR_H_
