// Chaos: a BSP job of toy workers on a real cluster (scheduler, two servers,
// separate processes on 127.0.0.1) while workers are killed, started,
// stopped past their lease, a server is killed and restarted on its data
// directory (the job rolls back to a snapshot), and the scheduler is killed
// and restarted on its data directory. The job must finish with every
// sample applied exactly once (from the ledger alone) and the loss of a
// fault-free run.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/process_util.h"
#include "tests/toy_reference.h"

namespace strata {
namespace {

using testing::Child;

constexpr int64_t kSteps = 400, kBatch = 48, kSamples = 960;
constexpr int kDim = 32;

double FinalLoss(const std::string& output) {
  std::smatch m;
  if (std::regex_search(output, m, std::regex("final_loss ([0-9.eE+-]+)")))
    return std::stod(m[1]);
  return -1;
}

// Expects `final_loss` (-1: none printed) to be the loss of the same job of
// `steps` steps without faults (the same batches, averaged in another
// order): float rounding apart, the same training. The small learning rate
// keeps the loss far from 0, so the comparison means something.
void ExpectFaultFreeLoss(double final_loss, int64_t steps) {
  ToyProblem p;
  p.dim = kDim;
  p.samples = kSamples;
  const std::vector<float> ref =
      testing::ToyReference(p, steps, kBatch, 0.002f, 1);
  const double ref_loss = ToyLoss(p, ref.data(), ref[kDim]);
  ASSERT_GE(final_loss, 0) << "no worker printed final_loss";
  ASSERT_GT(ref_loss, 1e-3);
  EXPECT_NEAR(final_loss, ref_loss, 0.01 * ref_loss)
      << "fault-free " << ref_loss;
}

// Start `n` (from 0) of a scheduler of two slots and a 0.8 s lease that
// keeps its state in `dir`/scheduler_state, listening on `listen` and
// writing its address to `dir`/addr<n>; `flags` added.
std::unique_ptr<Child> StartScheduler(const std::string& dir,
                                      const std::string& listen, int n,
                                      std::vector<std::string> flags = {}) {
  std::vector<std::string> args = {
      STRATA_BINARY,    "scheduler",
      "--listen",       listen,
      "--num_shards",   "2",
      "--data_dir",     dir + "/scheduler_state",
      "--lease_ms",     "800",
      "--address_file", absl::StrCat(dir, "/addr", n)};
  args.insert(args.end(), flags.begin(), flags.end());
  return std::make_unique<Child>(args,
                                 absl::StrCat(dir, "/scheduler", n, ".log"));
}

// The payload path under test: shared memory (the default on one host),
// or the bulk plane (UCX on TCP, as between hosts) with shared memory off
// and every payload on it.
class Chaos : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<std::string> WireFlags() const {
    if (GetParam() != "ucx") return {};
    setenv("UCX_TLS", "tcp", 1);  // the children inherit it
    return {"--shm", "false", "--wire", "ucx", "--bulk_min_bytes", "0"};
  }
};

TEST_P(Chaos, BspJobSurvivesKillsJoinsStopsAndServerAndSchedulerRestarts) {
  const std::string dir = testing::FreshDir("chaos_" + GetParam());
  const std::vector<std::string> wire = WireFlags();
  auto start_scheduler = [&](const std::string& listen, int n) {
    return StartScheduler(dir, listen, n);
  };
  auto scheduler = start_scheduler("127.0.0.1:0", 0);
  const std::string address = testing::WaitForLine(dir + "/addr0");
  ASSERT_FALSE(address.empty()) << scheduler->Output();
  int server_starts = 0;
  auto server = [&](int s) {
    return std::make_unique<Child>(
        std::vector<std::string>{STRATA_BINARY, "server", "--scheduler",
                                 address, "--shard", std::to_string(s),
                                 "--data_dir", absl::StrCat(dir, "/server", s),
                                 "--snapshot_every", "20"},
        absl::StrCat(dir, "/server", s, "_", server_starts++, ".log"));
  };
  std::vector<std::unique_ptr<Child>> servers;
  for (int s = 0; s < 2; ++s) servers.push_back(server(s));
  int next_worker = 0;
  auto worker = [&](int wait_for) {
    std::vector<std::string> flags = {"--dim",
                                      std::to_string(kDim),
                                      "--chunk_bytes",
                                      "64",
                                      "--sample_cost_us",
                                      "2000",
                                      "--lr",
                                      "0.002"};
    flags.insert(flags.end(), wire.begin(), wire.end());
    return testing::ToyWorker(STRATA_BINARY, address, dir, next_worker++,
                              wait_for, kSteps, kBatch, flags);
  };

  std::vector<std::unique_ptr<Child>> live;  // running, never signalled
  std::vector<std::unique_ptr<Child>> killed;
  for (int w = 0; w < 3; ++w) live.push_back(worker(3));

  std::mt19937 rng(20261123);
  // The events, in a shuffled order: 5 kills (each followed by a joiner),
  // 1 extra join, 1 SIGSTOP past the lease, 1 server kill and restart, 1
  // scheduler kill and restart.
  std::vector<std::string> events = {"kill", "kill",   "kill",
                                     "kill", "kill",   "join",
                                     "stop", "server", "scheduler"};
  std::shuffle(events.begin(), events.end(), rng);
  int kills = 0, joins = 0, stops = 0, restarts = 0, server_restarts = 0;
  for (const std::string& event : events) {
    absl::SleepFor(
        absl::Milliseconds(std::uniform_int_distribution<int>(900, 1600)(rng)));
    if (event == "kill" && !live.empty()) {
      const size_t victim =
          std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      EXPECT_EQ(live[victim]->Stop(SIGKILL), 128 + SIGKILL);
      killed.push_back(std::move(live[victim]));
      live.erase(live.begin() + static_cast<long>(victim));
      ++kills;
      live.push_back(worker(1));
      ++joins;
    } else if (event == "join") {
      live.push_back(worker(1));
      ++joins;
    } else if (event == "stop") {
      live.front()->Signal(SIGSTOP);
      absl::SleepFor(absl::Milliseconds(2000));  // 2.5 leases
      live.front()->Signal(SIGCONT);
      ++stops;
    } else if (event == "server") {
      EXPECT_EQ(servers[1]->Stop(SIGKILL), 128 + SIGKILL);
      servers[1] = server(1);
      ++server_restarts;
    } else if (event == "scheduler") {
      EXPECT_EQ(scheduler->Stop(SIGKILL), 128 + SIGKILL);
      absl::SleepFor(absl::Milliseconds(300));
      scheduler = start_scheduler(address, 1);
      ASSERT_FALSE(testing::WaitForLine(dir + "/addr1").empty())
          << scheduler->Output();
      ++restarts;
    }
  }
  EXPECT_EQ(kills, 5);
  EXPECT_GE(joins, 6);
  EXPECT_EQ(stops, 1);
  EXPECT_EQ(restarts, 1);
  EXPECT_EQ(server_restarts, 1);

  // Every worker never killed finishes; the last step was computed.
  double final_loss = -1;
  for (auto& w : live) {
    ASSERT_EQ(w->Wait(absl::Minutes(4)), 0) << w->Output();
    if (const double l = FinalLoss(w->Output()); l >= 0) final_loss = l;
  }
  const testing::LedgerCheck ledger =
      testing::CheckLedger(STRATA_BINARY, address, dir, kSteps * kBatch);
  testing::ExpectAppliedOnce(ledger, kSteps * kBatch);
  EXPECT_EQ(ledger.epochs_finished, kSteps * kBatch / kSamples)
      << ledger.output;

  ExpectFaultFreeLoss(final_loss, kSteps);

  if (GetParam() == "ucx") {
    // The payloads went on the bulk plane.
    Child status({STRATA_BINARY, "status", "--scheduler", address},
                 dir + "/status.log");
    ASSERT_EQ(status.Wait(absl::Seconds(30)), 0) << status.Output();
    const std::string out = status.Output();
    static const std::regex kBulk("payloads shm (\\d+) bulk (\\d+)");
    uint64_t shm = 0, bulk = 0;
    for (std::sregex_iterator it(out.begin(), out.end(), kBulk), end; it != end;
         ++it) {
      shm += std::stoull((*it)[1]);
      bulk += std::stoull((*it)[2]);
    }
    EXPECT_EQ(shm, 0u) << out;
    EXPECT_GT(bulk, 0u) << out;
  }

  // Nothing but the killed processes crashed.
  for (auto& s : servers) EXPECT_EQ(s->Stop(), 0) << s->Output();
  EXPECT_EQ(scheduler->Stop(), 0) << scheduler->Output();
}

INSTANTIATE_TEST_SUITE_P(Wire, Chaos, ::testing::Values("shm", "ucx"));

// A server killed with SIGKILL and restarted on its data directory: it is
// admitted at once, the job rolls back to the newest snapshot both servers
// hold, and goes on to the loss of a fault-free run with every sample
// applied once.
TEST(ChaosRollBack, BspJobRollsBackWhenAServerIsKilledAndRestarted) {
  const std::string dir = testing::FreshDir("server_kill");
  auto scheduler = std::make_unique<Child>(
      std::vector<std::string>{STRATA_BINARY, "scheduler", "--listen",
                               "127.0.0.1:0", "--num_shards", "2", "--lease_ms",
                               "800", "--address_file", dir + "/addr"},
      dir + "/scheduler.log");
  const std::string address = testing::WaitForLine(dir + "/addr");
  ASSERT_FALSE(address.empty()) << scheduler->Output();
  auto server = [&](int s, int n) {
    return testing::SnapshottingServer(STRATA_BINARY, address, dir, s, n, 20);
  };
  std::vector<std::unique_ptr<Child>> servers;
  for (int s = 0; s < 2; ++s) servers.push_back(server(s, 0));
  constexpr int64_t kJobSteps = 200;
  std::vector<std::unique_ptr<Child>> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(testing::ToyWorker(
        STRATA_BINARY, address, dir, w, 2, kJobSteps, kBatch,
        {"--dim", std::to_string(kDim), "--chunk_bytes", "64",
         "--sample_cost_us", "2000", "--lr", "0.002"}));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  while (workers[0]->Output().find("step 70 ") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_NE(workers[0]->Output().find("step 70 "), std::string::npos)
      << workers[0]->Output();
  EXPECT_EQ(servers[1]->Stop(SIGKILL), 128 + SIGKILL);
  auto restarted = server(1, 1);

  double final_loss = -1;
  for (auto& w : workers) {
    ASSERT_EQ(w->Wait(absl::Minutes(3)), 0) << w->Output();
    if (const double l = FinalLoss(w->Output()); l >= 0) final_loss = l;
  }
  // Back to a snapshot both servers hold (every 20 steps; killed after step
  // 70), not to the initial weights.
  std::smatch rolled;
  const std::string log = restarted->Output();
  ASSERT_TRUE(std::regex_search(log, rolled,
                                std::regex("rolled back to step ([0-9]+)")))
      << log;
  EXPECT_GE(std::stoll(rolled[1]), 40) << log;
  const testing::LedgerCheck ledger =
      testing::CheckLedger(STRATA_BINARY, address, dir, kJobSteps * kBatch);
  testing::ExpectAppliedOnce(ledger, kJobSteps * kBatch);

  ExpectFaultFreeLoss(final_loss, kJobSteps);
  EXPECT_EQ(servers[0]->Stop(), 0) << servers[0]->Output();
  EXPECT_EQ(restarted->Stop(), 0) << restarted->Output();
  EXPECT_EQ(scheduler->Stop(), 0) << scheduler->Output();
}

// The newest step a toy worker printed (its --log_every lines), or -1.
int64_t LastLoggedStep(const std::string& output) {
  static const std::regex kStep("step ([0-9]+) batch_loss");
  int64_t last = -1;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), kStep);
       it != std::sregex_iterator(); ++it) {
    last = std::max<int64_t>(last, std::stoll((*it)[1]));
  }
  return last;
}

// The scheduler killed for 3 s while two workers train: they go on with the
// steps they leased ahead (cluster/lease_ahead.h) and the servers keep
// their reports until it is back on its data directory; the job ends with
// every sample applied once. Parameter: the consistency.
class SchedulerOutage : public ::testing::TestWithParam<const char*> {};

TEST_P(SchedulerOutage, WorkersTrainThroughIt) {
  const std::string mode = GetParam();
  const std::string dir = testing::FreshDir(absl::StrCat("outage_", mode));
  auto start_scheduler = [&](const std::string& listen, int n) {
    return StartScheduler(dir, listen, n, {"--consistency", mode});
  };
  auto scheduler = start_scheduler("127.0.0.1:0", 0);
  const std::string address = testing::WaitForLine(dir + "/addr0");
  ASSERT_FALSE(address.empty()) << scheduler->Output();
  std::vector<std::unique_ptr<Child>> servers;
  for (int s = 0; s < 2; ++s) {
    servers.push_back(std::make_unique<Child>(
        std::vector<std::string>{STRATA_BINARY, "server", "--scheduler",
                                 address, "--shard", std::to_string(s),
                                 "--consistency", mode},
        absl::StrCat(dir, "/server", s, ".log")));
  }
  constexpr int64_t kJobSteps = 600;
  std::vector<std::unique_ptr<Child>> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(
        testing::ToyWorker(STRATA_BINARY, address, dir, w, 2, kJobSteps, kBatch,
                           {"--dim", std::to_string(kDim), "--chunk_bytes",
                            "64", "--sample_cost_us", "300", "--lr", "0.002"}));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  while (LastLoggedStep(workers[0]->Output()) < 30 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(LastLoggedStep(workers[0]->Output()), 30) << workers[0]->Output();
  EXPECT_EQ(scheduler->Stop(SIGKILL), 128 + SIGKILL);
  const int64_t at_kill = LastLoggedStep(workers[0]->Output());
  absl::SleepFor(absl::Seconds(3));
  const int64_t at_restart = LastLoggedStep(workers[0]->Output());
  scheduler = start_scheduler(address, 1);
  ASSERT_FALSE(testing::WaitForLine(dir + "/addr1").empty())
      << scheduler->Output();
  // Trained on while the scheduler was away: dozens of steps (a few ms
  // each), not none.
  EXPECT_GE(at_restart, at_kill + 30) << workers[0]->Output();
  for (auto& w : workers)
    ASSERT_EQ(w->Wait(absl::Minutes(3)), 0) << w->Output();
  const testing::LedgerCheck ledger =
      testing::CheckLedger(STRATA_BINARY, address, dir, kJobSteps * kBatch);
  testing::ExpectAppliedOnce(ledger, kJobSteps * kBatch);
  for (auto& s : servers) EXPECT_EQ(s->Stop(), 0) << s->Output();
  EXPECT_EQ(scheduler->Stop(), 0) << scheduler->Output();
}

// Waits up to `timeout` for `text` in `child`'s output.
bool WaitForOutput(const Child& child, const std::string& text,
                   absl::Duration timeout = absl::Seconds(60)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (child.Output().find(text) == std::string::npos) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// Each slot served by a primary and a backup (--replicas 2); the primary
// of slot 0 is killed with SIGKILL while two workers train, then the
// scheduler (restarted on its data directory). The backup takes over when
// the primary's lease runs out, and a new server of slot 0 catches up from
// it while the workers train: the job goes on with no rollback and ends
// with every sample applied once (and, under BSP, the loss of a
// fault-free run). Parameter: the consistency.
class ReplicaFailover : public ::testing::TestWithParam<const char*> {};

TEST_P(ReplicaFailover, PrimaryKilledNothingRollsBack) {
  const std::string mode = GetParam();
  const std::string dir = testing::FreshDir(
      absl::StrCat("failover_", mode[0] == 's' ? "ssp" : mode));
  auto scheduler = StartScheduler(dir, "127.0.0.1:0", 0,
                                  {"--consistency", mode, "--replicas", "2"});
  const std::string address = testing::WaitForLine(dir + "/addr0");
  ASSERT_FALSE(address.empty()) << scheduler->Output();
  // Primaries first (the slot's oldest member is its primary), then the
  // backups.
  std::vector<std::unique_ptr<Child>> servers;
  for (int n = 0; n < 4; ++n) {
    const int slot = n % 2;
    servers.push_back(std::make_unique<Child>(
        std::vector<std::string>{STRATA_BINARY, "server", "--scheduler",
                                 address, "--shard", std::to_string(slot),
                                 "--consistency", mode},
        absl::StrCat(dir, "/server", n, ".log")));
    ASSERT_TRUE(WaitForOutput(*servers.back(), "serving on"))
        << servers.back()->Output();
  }
  constexpr int64_t kJobSteps = 300;
  std::vector<std::unique_ptr<Child>> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(testing::ToyWorker(
        STRATA_BINARY, address, dir, w, 2, kJobSteps, kBatch,
        {"--dim", std::to_string(kDim), "--chunk_bytes", "64",
         "--sample_cost_us", "1000", "--lr", "0.002"}));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  while (LastLoggedStep(workers[0]->Output()) < 50 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(LastLoggedStep(workers[0]->Output()), 50) << workers[0]->Output();
  EXPECT_EQ(servers[0]->Stop(SIGKILL), 128 + SIGKILL);
  const int64_t at_kill = LastLoggedStep(workers[0]->Output());
  // Once the backup is the primary, the scheduler is killed too, and
  // started again on its data directory 2 s later.
  ASSERT_TRUE(WaitForOutput(*servers[2], "slot 0 primary, forwarding to 0"))
      << servers[2]->Output();
  EXPECT_EQ(scheduler->Stop(SIGKILL), 128 + SIGKILL);
  absl::SleepFor(absl::Seconds(2));
  scheduler = StartScheduler(dir, address, 1,
                             {"--consistency", mode, "--replicas", "2"});
  ASSERT_FALSE(testing::WaitForLine(dir + "/addr1").empty())
      << scheduler->Output();
  // A new server for slot 0 joins while the workers train: it catches up
  // from the promoted primary and becomes its backup.
  servers.push_back(std::make_unique<Child>(
      std::vector<std::string>{STRATA_BINARY, "server", "--scheduler", address,
                               "--shard", "0", "--consistency", mode},
      absl::StrCat(dir, "/server4.log")));

  double final_loss = -1;
  for (auto& w : workers) {
    ASSERT_EQ(w->Wait(absl::Minutes(3)), 0) << w->Output();
    if (const double l = FinalLoss(w->Output()); l >= 0) final_loss = l;
  }
  EXPECT_GT(LastLoggedStep(workers[0]->Output()), at_kill);
  // The backup became slot 0's primary; nothing rolled back anywhere.
  EXPECT_NE(servers[2]->Output().find("slot 0 backup of member"),
            std::string::npos)
      << servers[2]->Output();
  EXPECT_NE(servers[2]->Output().find("slot 0 primary, forwarding to 0"),
            std::string::npos)
      << servers[2]->Output();
  EXPECT_TRUE(WaitForOutput(*servers[4], "installed the state of member"))
      << servers[4]->Output();
  EXPECT_TRUE(WaitForOutput(*servers[4], "slot 0 backup of member"))
      << servers[4]->Output();
  for (int n = 0; n < 2; ++n) {
    const std::string log =
        testing::ReadFile(absl::StrCat(dir, "/scheduler", n, ".log"));
    EXPECT_EQ(log.find("rolls back"), std::string::npos) << log;
  }
  for (auto& w : workers) {
    EXPECT_EQ(w->Output().find("rolled back"), std::string::npos)
        << w->Output();
  }
  const testing::LedgerCheck ledger =
      testing::CheckLedger(STRATA_BINARY, address, dir, kJobSteps * kBatch);
  testing::ExpectAppliedOnce(ledger, kJobSteps * kBatch);
  if (mode == "bsp") ExpectFaultFreeLoss(final_loss, kJobSteps);
  for (size_t n = 1; n < servers.size(); ++n) {
    EXPECT_EQ(servers[n]->Stop(), 0) << servers[n]->Output();
  }
  EXPECT_EQ(scheduler->Stop(), 0) << scheduler->Output();
}

INSTANTIATE_TEST_SUITE_P(Consistency, ReplicaFailover,
                         ::testing::Values("bsp", "ssp:2", "asp"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           const std::string m = p.param;
                           return m == "ssp:2" ? std::string("ssp") : m;
                         });

INSTANTIATE_TEST_SUITE_P(Consistency, SchedulerOutage,
                         ::testing::Values("bsp", "asp"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

}  // namespace
}  // namespace strata
