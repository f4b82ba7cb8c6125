// Starting and stopping the real `strata` binary from tests.
#ifndef STRATA_TESTS_PROCESS_UTIL_H_
#define STRATA_TESTS_PROCESS_UTIL_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace strata::testing {

// A child process whose stdout and stderr go to `log`. Killed on destruction
// if still running.
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& log)
      : log_(log) {
    std::vector<char*> argv;
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&pid_, copy[0].c_str(), &fa, nullptr, argv.data(),
                    environ) != 0)
      pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Child() {
    if (pid_ > 0 && !exited_) Stop(SIGKILL);
  }
  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Waits for exit; the exit code (128+signal if killed), -1 on timeout.
  int Wait(absl::Duration timeout = absl::Minutes(5)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }
  int Stop(int sig = SIGTERM) {
    kill(pid_, sig);
    int rc = Wait(absl::Seconds(20));
    if (rc == -1) {
      kill(pid_, SIGKILL);
      rc = Wait();
    }
    return rc;
  }
  // Sends `sig` (e.g. SIGSTOP, SIGCONT) without waiting.
  void Signal(int sig) { kill(pid_, sig); }
  std::string Output() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string log_;
};

// Waits for a file ending in a newline; its content without the newline.
inline std::string WaitForLine(const std::string& path,
                               absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string s = ss.str();
    if (!s.empty() && s.back() == '\n') return s.substr(0, s.size() - 1);
    absl::SleepFor(absl::Milliseconds(20));
  }
  return "";
}

// A whole file's contents ("" when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A scheduler (`--num_shards 2` plus `scheduler_flags`) and two servers of
// `binary` on 127.0.0.1, logging into `dir`.
class TestCluster {
 public:
  // `server_flags` go to both servers, with "@SHARD@" in one replaced by
  // the server's shard slot and "@DIR@" by `dir`.
  TestCluster(const std::string& binary, const std::string& dir,
              const std::vector<std::string>& scheduler_flags = {},
              const std::vector<std::string>& server_flags = {}) {
    std::vector<std::string> args = {
        binary,         "scheduler", "--listen",       "127.0.0.1:0",
        "--num_shards", "2",         "--address_file", dir + "/addr"};
    args.insert(args.end(), scheduler_flags.begin(), scheduler_flags.end());
    scheduler_ = std::make_unique<Child>(args, dir + "/scheduler.log");
    address_ = WaitForLine(dir + "/addr");
    if (address_.empty()) return;
    for (int s = 0; s < 2; ++s) {
      std::vector<std::string> args = {binary,   "server",  "--scheduler",
                                       address_, "--shard", std::to_string(s)};
      for (std::string f : server_flags) {
        for (auto [from, to] :
             {std::pair<std::string, std::string>{"@SHARD@", std::to_string(s)},
              {"@DIR@", dir}}) {
          for (size_t at; (at = f.find(from)) != std::string::npos;)
            f.replace(at, from.size(), to);
        }
        args.push_back(f);
      }
      servers_.push_back(std::make_unique<Child>(
          args, dir + "/server" + std::to_string(s) + ".log"));
    }
  }
  // The scheduler's address; empty if it did not start.
  const std::string& address() const { return address_; }
  Child& scheduler() { return *scheduler_; }
  // Stops the servers, then the scheduler; each must exit with 0.
  void Stop() {
    for (auto& s : servers_) EXPECT_EQ(s->Stop(), 0) << s->Output();
    EXPECT_EQ(scheduler_->Stop(), 0) << scheduler_->Output();
  }

 private:
  std::unique_ptr<Child> scheduler_;
  std::vector<std::unique_ptr<Child>> servers_;
  std::string address_;
};

// A `strata server` of shard slot `shard` of the scheduler at `address`,
// keeping snapshots every `snapshot_every` steps in <dir>/server<shard>, so
// that a restart on that directory restores them; its log is
// <dir>/server<shard>_<start>.log (`start` counts the starts, so a
// restart's log does not overwrite the first one's).
inline std::unique_ptr<Child> SnapshottingServer(const std::string& binary,
                                                 const std::string& address,
                                                 const std::string& dir,
                                                 int shard, int start,
                                                 int snapshot_every) {
  return std::make_unique<Child>(
      std::vector<std::string>{binary, "server", "--scheduler", address,
                               "--shard", std::to_string(shard), "--data_dir",
                               absl::StrCat(dir, "/server", shard),
                               "--snapshot_every",
                               std::to_string(snapshot_every)},
      absl::StrCat(dir, "/server", shard, "_", start, ".log"));
}

// A `strata toy` worker of the scheduler at `address`: it waits for
// `wait_for` live workers, then trains `steps` steps of `batch` samples of a
// 960-sample problem, logging every 10 steps to <dir>/worker<n>.log; `extra`
// flags follow.
inline std::unique_ptr<Child> ToyWorker(const std::string& binary,
                                        const std::string& address,
                                        const std::string& dir, int n,
                                        int wait_for, int64_t steps,
                                        int64_t batch,
                                        std::vector<std::string> extra) {
  std::vector<std::string> args = {binary,        "toy",
                                   "--scheduler", address,
                                   "--workers",   std::to_string(wait_for),
                                   "--steps",     std::to_string(steps),
                                   "--batch",     std::to_string(batch),
                                   "--samples",   "960",
                                   "--log_every", "10"};
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<Child>(args,
                                 dir + "/worker" + std::to_string(n) + ".log");
}

// The BSP audit of every server, summed, from `strata status` output.
struct BspAudit {
  int servers = 0;
  uint64_t chunks = 0;
  uint64_t samples = 0;  // behind closed steps, each chunk counting its own
  uint64_t tiling_errors = 0;
  uint64_t redone = 0;
};

inline BspAudit ParseBspAudit(const std::string& status_output) {
  static const std::regex kServer(
      "chunks (\\d+) .* bsp_samples (\\d+)  bsp_tiling_errors (\\d+)  "
      "redone (\\d+)");
  BspAudit a;
  for (std::sregex_iterator
           it(status_output.begin(), status_output.end(), kServer),
       end;
       it != end; ++it) {
    ++a.servers;
    a.chunks += std::stoull((*it)[1]);
    a.samples += std::stoull((*it)[2]);
    a.tiling_errors += std::stoull((*it)[3]);
    a.redone += std::stoull((*it)[4]);
  }
  return a;
}

// `strata ledger --check` of the scheduler at `address`, parsed.
struct LedgerCheck {
  int rc = -1;
  std::string output;
  int64_t samples = -1;
  int64_t epochs_finished = -1;
  int64_t duplicated = -1;
  int64_t missing = -1;
};

// Runs `strata ledger --check --out <dir>/ledger.jsonl` until its audit
// counts at least `samples` applied samples (the servers' last reports may
// still be on their way) or `timeout` passes; returns the last run.
inline LedgerCheck CheckLedger(const std::string& binary,
                               const std::string& address,
                               const std::string& dir, int64_t samples,
                               absl::Duration timeout = absl::Seconds(20)) {
  static const std::regex kAudit(
      "samples (\\d+)  epochs_finished (\\d+)  duplicated (\\d+)  missing "
      "(\\d+)");
  const absl::Time deadline = absl::Now() + timeout;
  LedgerCheck c;
  for (;;) {
    Child run({binary, "ledger", "--scheduler", address, "--check", "--out",
               dir + "/ledger.jsonl"},
              dir + "/ledger_check.log");
    c.rc = run.Wait(absl::Seconds(30));
    c.output = run.Output();
    std::smatch m;
    if (std::regex_search(c.output, m, kAudit)) {
      c.samples = std::stoll(m[1]);
      c.epochs_finished = std::stoll(m[2]);
      c.duplicated = std::stoll(m[3]);
      c.missing = std::stoll(m[4]);
    }
    if (c.samples >= samples || absl::Now() > deadline) return c;
    absl::SleepFor(absl::Milliseconds(200));
  }
}

// Expects (gtest) that `check` passed and counted `samples` samples, none
// lost and none applied twice.
inline void ExpectAppliedOnce(const LedgerCheck& check, int64_t samples) {
  EXPECT_EQ(check.rc, 0) << check.output;
  EXPECT_EQ(check.samples, samples) << check.output;
  EXPECT_EQ(check.duplicated, 0) << check.output;
  EXPECT_EQ(check.missing, 0) << check.output;
}

}  // namespace strata::testing

#endif  // STRATA_TESTS_PROCESS_UTIL_H_
