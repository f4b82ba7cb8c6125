// Waiting for Ctrl-C / SIGTERM in the long-running subcommands.
#ifndef STRATA_CLI_SIGNALS_H_
#define STRATA_CLI_SIGNALS_H_

#include <functional>

namespace strata {

// Blocks SIGINT and SIGTERM in the calling thread and every thread it
// starts afterwards. Call first thing in main.
void BlockShutdownSignals();

// Starts a thread that waits for SIGINT or SIGTERM and then calls
// `on_signal` once. Returns at once.
void OnShutdownSignal(std::function<void()> on_signal);

}  // namespace strata

#endif  // STRATA_CLI_SIGNALS_H_
