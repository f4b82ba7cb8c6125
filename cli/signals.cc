#include "cli/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>

namespace strata {
namespace {

int g_pipe[2] = {-1, -1};
std::atomic<int> g_signals{0};

void Handle(int) {
  // Async-signal-safe only: count, and wake the watcher thread.
  if (g_signals.fetch_add(1) > 0) _exit(130);
  const char byte = 1;
  (void)!write(g_pipe[1], &byte, 1);
}

}  // namespace

void OnShutdownSignal(std::function<void()> on_signal) {
  if (pipe(g_pipe) != 0) return;
  struct sigaction sa = {};
  sa.sa_handler = Handle;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::thread([on_signal = std::move(on_signal)] {
    char byte;
    while (read(g_pipe[0], &byte, 1) < 0) {
    }
    on_signal();
  }).detach();
}

}  // namespace strata
