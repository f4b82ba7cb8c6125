// `strata local`'s launch: what a run starts (its plan, saved in the run's
// directory so that --resume starts the same job again), and starting it:
// the scheduler, the servers and the workers as processes of this binary,
// supervised until the workers end.
#ifndef STRATA_CLI_LOCAL_LAUNCH_H_
#define STRATA_CLI_LOCAL_LAUNCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {

// What a run starts, saved as <dir>/local.json so `--resume` starts the
// same job again.
struct LocalPlan {
  int servers = 2;   // shard slots
  int replicas = 1;  // servers per slot (server-<slot>, replica-<r>/...)
  int workers = 2;
  std::string consistency = "bsp";
  int64_t snapshot_every = 100;
  bool toy = false;
  bool tls = false;
  uint64_t ram_budget = 0;
  std::string tokenizer_dir;  // copied into the run on its first launch
  // The workers' flags, without --scheduler and the per-worker --metrics.
  std::vector<std::string> worker_args;
  // Worker `straggler` (0-based; -1: none) also gets straggler_args (its
  // --slowdown, --jitter and --slowdown_steps).
  int straggler = -1;
  std::vector<std::string> straggler_args;
};

// <dir>/local.json: writes (durably) and reads a plan. LoadPlan: NOT_FOUND
// for a directory that is no run's, DATA_LOSS for a malformed file.
absl::Status SavePlan(const LocalPlan& p, const std::string& path);
absl::StatusOr<LocalPlan> LoadPlan(const std::string& path);

// The data directory of `slot`'s replica number `replica` in the run in
// `dir`: <dir>/server-<slot> for the first, <dir>/replica-<r>/server-<slot>
// for the others (so storage/server_dirs.h reads each replica's set alike).
std::string ReplicaDir(const std::string& dir, int replica, int slot);

// Starts the run of `o` in `dir` ("": a fresh /tmp/strata-local-XXXXXX),
// at `resume_step` (-1: a new run), and supervises it until its workers
// end or a signal stops it; the process's exit code (0, 1, or 130 after a
// signal), with what happened logged.
int Launch(const LocalPlan& o, std::string dir, int64_t resume_step);

}  // namespace strata

#endif  // STRATA_CLI_LOCAL_LAUNCH_H_
