// `strata local`'s watch over its children while the workers run:
// restarting a server that dies (cli/cmd_local.cc starts them).
#ifndef STRATA_CLI_SUPERVISE_H_
#define STRATA_CLI_SUPERVISE_H_

#include <sys/types.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace strata {

// A server of the run: its shard and command line.
struct ServerProcess {
  int shard = 0;
  std::vector<std::string> args;
  int restarts = 0;
};

// A server may die and be started again this many times in a run, a
// second after it died.
constexpr int kServerRestarts = 3;

// How the workers ended: how many failed, and why the run stopped them
// ("" when they ended on their own).
struct WorkersEnd {
  int failed = 0;
  std::string stopped_because;
};

// Waits for every worker to exit. A server that fails while another server
// of its slot (a replica) runs is started again on its data directory: the
// slot goes on, and the new process catches up from the live replica
// (server/replica_catch_up.h); past kServerRestarts it is left dead. (A
// replica still catching up counts as live here: under SSP/ASP the
// scheduler refuses a server into a slot whose primary died before its
// joiner caught up, and the run stops.) Otherwise, under BSP
// (`restart_servers`), a server
// that fails meanwhile (killed, or stopped by an error such as a lost
// spilled tile) is started again on its data directory, as a container's
// restart policy would: it restores its newest snapshot and the job rolls
// back to the newest step every server holds. Under SSP and ASP there is
// no such rollback (a restarted server would serve its own snapshot or its
// initial weights), so a server that dies stops the run, as do a server
// past kServerRestarts, a scheduler that exits (a new one would listen on
// another port) and a server that exits 0 (it was told to stop). `daemons`
// (the scheduler and servers, stopped at the end) follows the restarts.
WorkersEnd SuperviseUntilWorkersEnd(
    const std::vector<pid_t>& workers,
    absl::flat_hash_map<pid_t, ServerProcess>& servers,
    std::vector<pid_t>& daemons, const std::atomic<bool>& interrupted,
    bool restart_servers);

}  // namespace strata

#endif  // STRATA_CLI_SUPERVISE_H_
