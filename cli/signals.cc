#include "cli/signals.h"

#include <pthread.h>
#include <signal.h>

#include <thread>

namespace strata {
namespace {
sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void OnShutdownSignal(std::function<void()> on_signal) {
  std::thread([on_signal = std::move(on_signal)] {
    sigset_t set = ShutdownSet();
    int sig = 0;
    sigwait(&set, &sig);
    on_signal();
  }).detach();
}

}  // namespace strata
