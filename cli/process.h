// Child processes of `strata local`: the same binary, one role each.
#ifndef STRATA_CLI_PROCESS_H_
#define STRATA_CLI_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata {

// Starts this binary again with `args` (args[0] is the subcommand):
// /proc/self/exe, or, when $STRATA_SELF_EXEC is set, the command it names
// (space-separated words; for a binary started through a loader, as the
// GPU bundle does). Its stdout and stderr are those of this process.
// Returns the child's pid.
absl::StatusOr<pid_t> SpawnSelf(const std::vector<std::string>& args);

// Waits for `pid` to exit; its exit code (128+signal if killed).
int WaitChild(pid_t pid);

// Waits for any child to exit: its pid and exit code (128+signal if
// killed); pid -1 when there are no children left.
std::pair<pid_t, int> WaitAnyChild();

// Sends SIGTERM, waits up to `grace`, then SIGKILL. Returns the exit code.
int StopChild(pid_t pid, absl::Duration grace);

// Reads a file that another process writes once it is ready, waiting up to
// `timeout` for it to appear and be non-empty.
absl::StatusOr<std::string> WaitForFile(const std::string& path,
                                        absl::Duration timeout);

}  // namespace strata

#endif  // STRATA_CLI_PROCESS_H_
