#include "cli/supervise.h"

#include <signal.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/process.h"
#include "spdlog/spdlog.h"

namespace strata {

namespace {

bool SlotServed(const absl::flat_hash_map<pid_t, ServerProcess>& servers,
                int shard) {
  for (const auto& [pid, s] : servers) {
    if (s.shard == shard) return true;
  }
  return false;
}

}  // namespace

WorkersEnd SuperviseUntilWorkersEnd(
    const std::vector<pid_t>& workers,
    absl::flat_hash_map<pid_t, ServerProcess>& servers,
    std::vector<pid_t>& daemons, const std::atomic<bool>& interrupted,
    bool restart_servers) {
  absl::flat_hash_set<pid_t> running(workers.begin(), workers.end());
  WorkersEnd end;
  auto stop_workers = [&](std::string why) {
    spdlog::error("strata local: {}; stopping the workers", why);
    end.stopped_because = std::move(why);
    for (pid_t w : running) kill(w, SIGTERM);
  };
  while (!running.empty()) {
    const auto [pid, code] = WaitAnyChild();
    if (pid < 0) break;
    if (running.erase(pid) > 0) {
      end.failed += code != 0;
      continue;
    }
    daemons.erase(std::remove(daemons.begin(), daemons.end(), pid),
                  daemons.end());
    if (interrupted || !end.stopped_because.empty()) continue;
    auto it = servers.find(pid);
    if (it == servers.end()) {
      stop_workers(absl::StrCat("the scheduler exited (code ", code, ")"));
      continue;
    }
    ServerProcess server = std::move(it->second);
    servers.erase(it);
    const std::string exited =
        absl::StrCat("server ", server.shard, " exited (code ", code, ")");
    // A replica of its slot serves on, with every update acknowledged: the
    // job goes on, and the server started again catches up from it while
    // training runs, under every consistency.
    const bool replica_serves = code != 0 && SlotServed(servers, server.shard);
    if (code == 0 || (!restart_servers && !replica_serves)) {
      stop_workers(exited);
      continue;
    }
    if (server.restarts >= kServerRestarts && replica_serves) {
      spdlog::warn(
          "strata local: {} after {} restarts; its slot goes on with "
          "a replica",
          exited, server.restarts);
      continue;
    }
    if (server.restarts >= kServerRestarts) {
      stop_workers(
          absl::StrCat(exited, " after ", server.restarts, " restarts"));
      continue;
    }
    // Not --restore_step again: the first start dropped the snapshots
    // after it; a second would drop those taken since.
    std::vector<std::string>& args = server.args;
    if (auto at = std::find(args.begin(), args.end(), "--restore_step");
        at != args.end()) {
      args.erase(at, at + 2);
    }
    spdlog::warn("strata local: {}; starting it again: {}", exited,
                 replica_serves ? "it catches up from its slot's live replica"
                                : "it restores its newest snapshot");
    absl::SleepFor(absl::Seconds(1));
    absl::StatusOr<pid_t> again = SpawnSelf(args);
    if (!again.ok()) {
      stop_workers(absl::StrCat(
          "server ", server.shard,
          " cannot be started again: ", again.status().ToString()));
      continue;
    }
    server.restarts++;
    daemons.push_back(*again);
    servers[*again] = std::move(server);
  }
  return end;
}

}  // namespace strata
