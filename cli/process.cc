#include "cli/process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace strata {

absl::StatusOr<pid_t> SpawnSelf(const std::vector<std::string>& args) {
  // This binary again: /proc/self/exe, unless a launcher started it (the
  // GPU bundle's loader: scripts/gpu-bundle.sh), which says how in
  // $STRATA_SELF_EXEC, words separated by spaces.
  std::vector<std::string> copy = {"/proc/self/exe"};
  if (const char* self = std::getenv("STRATA_SELF_EXEC");
      self != nullptr && *self != '\0') {
    copy = absl::StrSplit(self, ' ', absl::SkipEmpty());
  }
  if (copy.empty()) {
    return absl::InvalidArgumentError("STRATA_SELF_EXEC names no program");
  }
  copy.insert(copy.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string exe = copy[0];
  // The child starts with no signals blocked, whatever this thread blocks.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int rc =
      posix_spawn(&pid, exe.c_str(), nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return absl::InternalError(absl::StrCat(
        "cannot start strata ", args[0], " (", exe, "): ", std::strerror(rc)));
  return pid;
}

int WaitChild(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::pair<pid_t, int> WaitAnyChild() {
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, 0)) < 0) {
    if (errno != EINTR) return {-1, -1};
  }
  if (WIFEXITED(status)) return {pid, WEXITSTATUS(status)};
  if (WIFSIGNALED(status)) return {pid, 128 + WTERMSIG(status)};
  return {pid, -1};
}

int StopChild(pid_t pid, absl::Duration grace) {
  kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  int status = 0;
  while (absl::Now() < deadline) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -1;
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid, SIGKILL);
  return WaitChild(pid);
}

absl::StatusOr<std::string> WaitForFile(const std::string& path,
                                        absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  do {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    if (f && !ss.str().empty() && ss.str().back() == '\n') {
      std::string s = ss.str();
      s.pop_back();
      return s;
    }
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < deadline);
  return absl::DeadlineExceededError(
      absl::StrCat("timed out waiting for ", path));
}

}  // namespace strata
