// Gloo between processes and hosts: a Communicator whose ranks connect over
// TCP (a full mesh of pairs) after exchanging addresses through a rendezvous
// store, normally the scheduler's KV (kv_rendezvous.h). The collectives are
// rings (all-reduce = reduce-scatter ring + all-gather ring) over Gloo's
// TCP pairs and point-to-point buffers, so Abort can end any wait. Gloo's
// exceptions end at this boundary and come back as Status.
#ifndef STRATA_COLLECTIVE_GLOO_COMMUNICATOR_H_
#define STRATA_COLLECTIVE_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/communicator.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace strata {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // The address this rank listens on and its peers dial: an address of one
  // of this host's interfaces, or a name resolving to one.
  std::string hostname = "127.0.0.1";
  // How long forming the group may wait for every rank.
  absl::Duration connect_timeout = absl::Seconds(60);
  CommunicatorOptions comm;
};

// Forms the group: publishes this rank's address in `store`, waits for all
// `size` ranks and connects to each. Every rank calls it with a store that
// no earlier group used (a fresh prefix). Errors: INVALID_ARGUMENT for a
// bad rank or size, UNAVAILABLE when the address cannot be bound or a peer
// cannot be reached, DEADLINE_EXCEEDED when a rank does not arrive within
// connect_timeout.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(
    const GlooOptions& options, gloo::rendezvous::Store& store);

// A Gloo group of `ranks` ranks inside this process, over loopback TCP, one
// thread per rank connecting through an in-memory store (for benchmarks and
// tests). Errors: the first rank's ConnectGloo error.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeLocalGlooGroup(
    int ranks);

}  // namespace strata

#endif  // STRATA_COLLECTIVE_GLOO_COMMUNICATOR_H_
