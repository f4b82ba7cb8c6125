// Graceful shutdown on Ctrl-C / SIGTERM in the long-running subcommands.
#ifndef STRATA_CLI_SIGNALS_H_
#define STRATA_CLI_SIGNALS_H_

#include <functional>

namespace strata {

// Installs handlers for SIGINT and SIGTERM and starts a thread that calls
// `on_signal` once when either arrives (whichever thread the kernel
// delivers it to: the handler only writes to a pipe). A second signal
// while shutting down exits at once with status 130. Call at most once.
void OnShutdownSignal(std::function<void()> on_signal);

}  // namespace strata

#endif  // STRATA_CLI_SIGNALS_H_
