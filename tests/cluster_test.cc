// A real cluster in separate processes on 127.0.0.1: one scheduler, two
// parameter servers and three toy workers (`strata toy`), training a
// least-squares model through push/pull with Adam, under each consistency.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <regex>

#include "absl/strings/str_cat.h"
#include "examples/toy/toy_problem.h"
#include "optim/optimizer.h"
#include "tests/process_util.h"
#include "tests/toy_reference.h"

namespace strata {
namespace {

using testing::Child;

constexpr int kWorkers = 3;

struct ClusterRun {
  std::string consistency;
  int64_t steps = 60;
  int64_t batch = 48;
  int dim = 64;
  int64_t samples = 960;
  float lr = 0.02f;
  bool probe = false;
  int delay_ms = 0;
};

struct Result {
  std::vector<float> weights;  // w then b, from rank 0
  std::vector<std::string> outputs;
};

// Starts the cluster, runs the workers to completion, stops the cluster.
Result RunCluster(const ClusterRun& run, const std::string& name) {
  const std::string dir = testing::FreshDir(name);
  Result result;
  testing::TestCluster cluster(
      STRATA_BINARY, dir,
      {"--consistency", run.consistency, "--lease_ms", "5000"});
  const std::string address = cluster.address();
  EXPECT_FALSE(address.empty()) << cluster.scheduler().Output();
  if (address.empty()) return result;
  std::vector<std::unique_ptr<Child>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    std::vector<std::string> args = {
        STRATA_BINARY,   "toy",
        "--scheduler",   address,
        "--workers",     std::to_string(kWorkers),
        "--steps",       std::to_string(run.steps),
        "--batch",       std::to_string(run.batch),
        "--dim",         std::to_string(run.dim),
        "--samples",     std::to_string(run.samples),
        "--optimizer",   "adam",
        "--lr",          absl::StrCat(run.lr),
        "--chunk_bytes", "64",
        "--out",         dir + "/weights.f32",
        "--log_every",   "0",
        "--delay_ms",    std::to_string(run.delay_ms)};
    if (run.probe) args.push_back("--probe");
    workers.push_back(
        std::make_unique<Child>(args, absl::StrCat(dir, "/worker", w, ".log")));
  }
  for (auto& w : workers) {
    const int rc = w->Wait();
    EXPECT_EQ(rc, 0) << w->Output();
    result.outputs.push_back(w->Output());
  }
  cluster.Stop();
  std::ifstream f(dir + "/weights.f32", std::ios::binary);
  result.weights.resize(run.dim + 1);
  f.read(reinterpret_cast<char*>(result.weights.data()), (run.dim + 1) * 4);
  if (!f) result.weights.clear();
  return result;
}

// The same training in one process.
std::vector<float> Reference(const ClusterRun& run) {
  ToyProblem p;
  p.dim = run.dim;
  p.samples = run.samples;
  return testing::ToyReference(p, run.steps, run.batch, run.lr, kWorkers);
}

double FinalLoss(const std::string& output) {
  std::smatch m;
  if (std::regex_search(output, m, std::regex("final_loss ([0-9.eE+-]+)")))
    return std::stod(m[1]);
  return -1;
}

double InitialLoss(const ClusterRun& run) {
  ToyProblem p;
  p.dim = run.dim;
  p.samples = run.samples;
  std::vector<float> zeros(run.dim, 0.0f);
  return ToyLoss(p, zeros.data(), 0.0f);
}

TEST(Cluster, BspMatchesASingleProcessReference) {
  ClusterRun run;
  run.consistency = "bsp";
  Result r = RunCluster(run, "bsp");
  ASSERT_EQ(r.weights.size(), static_cast<size_t>(run.dim + 1));
  const std::vector<float> ref = Reference(run);
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(r.weights[i], ref[i], 1e-6 * std::fabs(ref[i]) + 1e-7)
        << "element " << i;
  }
  // And it learned something: the loss fell well below where it started.
  const double loss = FinalLoss(r.outputs[0] + r.outputs[1] + r.outputs[2]);
  ASSERT_GT(loss, 0);
  EXPECT_LT(loss, 0.2 * InitialLoss(run));
}

TEST(Cluster, SspNeverReadsOlderThanTheBoundAndConverges) {
  ClusterRun run;
  run.consistency = "ssp:2";
  run.probe = true;
  run.delay_ms = 4;  // rank r sleeps 4r ms per step: the fast worker runs ahead
  run.steps = 80;
  Result r = RunCluster(run, "ssp");
  int64_t reads = 0, stale = 0;
  for (const std::string& out : r.outputs) {
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(out, m,
                          std::regex("ssp_reads ([0-9]+) ssp_violations "
                                     "([0-9]+) ssp_stale_reads ([0-9]+)")))
        << out;
    reads += std::stoll(m[1]);
    EXPECT_EQ(std::stoll(m[2]), 0) << "a read older than the staleness bound:\n"
                                   << out;
    stale += std::stoll(m[3]);
  }
  // Each worker checked every clock below --steps it ran; shares follow
  // speed, so a worker may finish the job's samples a few clocks early.
  EXPECT_LE(reads, kWorkers * run.steps);
  EXPECT_GE(reads, kWorkers * (run.steps - 5));
  // The bound was exercised: some reads did miss recent updates.
  EXPECT_GT(stale, 0);
  std::string all;
  for (auto& o : r.outputs) all += o;
  const double loss = FinalLoss(all);
  ASSERT_GT(loss, 0);
  EXPECT_LT(loss, 0.2 * InitialLoss(run));
}

TEST(Cluster, AspConverges) {
  ClusterRun run;
  run.consistency = "asp";
  run.delay_ms = 2;
  Result r = RunCluster(run, "asp");
  std::string all;
  for (auto& o : r.outputs) all += o;
  const double loss = FinalLoss(all);
  ASSERT_GT(loss, 0);
  EXPECT_LT(loss, 0.2 * InitialLoss(run));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Workers leave and join mid-run under BSP: one is killed (SIGKILL, no
// Leave), a new one joins, and one is stopped (SIGSTOP) past its lease and
// woken. None of it stalls the job: a dead or stopped worker's lease runs
// out, and each change of the live workers makes the open step be redone
// with the new view's shares. Every closed step's update covers its
// samples exactly once: the servers' audit finds no gap or overlap, and
// counts every step's whole batch on every chunk.
TEST(Cluster, BspStepsUseEverySampleOnceAsWorkersDieAndJoin) {
  const std::string dir = testing::FreshDir("kill");
  testing::TestCluster cluster(STRATA_BINARY, dir, {"--lease_ms", "800"});
  const std::string address = cluster.address();
  ASSERT_FALSE(address.empty());
  std::vector<std::unique_ptr<Child>> workers;
  constexpr int kSteps = 150, kBatch = 48;
  auto worker = [&](int w, int wait_for) {
    return std::make_unique<Child>(
        std::vector<std::string>{STRATA_BINARY,   "toy",
                                 "--scheduler",   address,
                                 "--workers",     std::to_string(wait_for),
                                 "--steps",       std::to_string(kSteps),
                                 "--batch",       std::to_string(kBatch),
                                 "--dim",         "64",
                                 "--samples",     "960",
                                 "--chunk_bytes", "64",
                                 "--delay_ms",    "5",
                                 "--log_every",   "10"},
        absl::StrCat(dir, "/worker", w, ".log"));
  };
  for (int w = 0; w < kWorkers; ++w) workers.push_back(worker(w, kWorkers));
  // Let training get going, then kill one worker without warning and start
  // another.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (workers[2]->Output().find("step 20 ") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_NE(workers[2]->Output().find("step 20 "), std::string::npos)
      << workers[2]->Output();
  EXPECT_EQ(workers[2]->Stop(SIGKILL), 128 + SIGKILL);
  workers.push_back(worker(3, 1));
  // A worker stopped for longer than its lease is fenced; when it wakes it
  // registers again under a new member id and redoes its step.
  while (workers[0]->Output().find("step 70 ") == std::string::npos &&
         absl::Now() < deadline + absl::Seconds(60)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  workers[1]->Signal(SIGSTOP);
  absl::SleepFor(absl::Milliseconds(2500));
  workers[1]->Signal(SIGCONT);
  for (int w : {0, 1, 3}) {
    EXPECT_EQ(workers[w]->Wait(absl::Minutes(3)), 0) << workers[w]->Output();
  }
  // The stopped worker may find the job finished when it wakes; the others
  // computed every step to the last.
  for (int w : {0, 3}) {
    EXPECT_NE(workers[w]->Output().find("step 149 "), std::string::npos)
        << workers[w]->Output();
  }
  EXPECT_NE(workers[1]->Output().find("lease of member"), std::string::npos)
      << workers[1]->Output();
  Child status({STRATA_BINARY, "status", "--scheduler", address},
               dir + "/status.log");
  ASSERT_EQ(status.Wait(absl::Seconds(30)), 0) << status.Output();
  // w: 64 floats in chunks of 16, b: 1 float; 5 chunks over the 2 servers.
  const std::string out = status.Output();
  const testing::BspAudit audit = testing::ParseBspAudit(out);
  EXPECT_EQ(audit.servers, 2) << out;
  EXPECT_EQ(audit.chunks, 5u) << out;
  EXPECT_EQ(audit.samples, uint64_t{kSteps} * kBatch * audit.chunks) << out;
  EXPECT_EQ(audit.tiling_errors, 0u) << out;
  EXPECT_GT(audit.redone, 0u) << out;  // the changes did make steps be redone
  // The scheduler's ledger says the same: every sample of the 7 finished
  // data epochs (960 samples each) once, and the half epoch after them.
  const testing::LedgerCheck ledger =
      testing::CheckLedger(STRATA_BINARY, address, dir, kSteps * kBatch);
  testing::ExpectAppliedOnce(ledger, kSteps * kBatch);
  EXPECT_EQ(ledger.epochs_finished, 7) << ledger.output;
  cluster.Stop();
}

// ASP: a worker killed mid-run leaves units leased; they are handed out
// again, and the ledger still shows every sample applied once.
TEST(Cluster, AspHandsADeadWorkersUnitsOutAgain) {
  const std::string dir = testing::FreshDir("asp_kill");
  testing::TestCluster cluster(STRATA_BINARY, dir,
                               {"--consistency", "asp", "--lease_ms", "800"});
  const std::string address = cluster.address();
  ASSERT_FALSE(address.empty());
  constexpr int kSteps = 80, kBatch = 48;
  auto worker = [&](int w) {
    return testing::ToyWorker(
        STRATA_BINARY, address, dir, w, 2, kSteps, kBatch,
        {"--dim", "64", "--chunk_bytes", "64", "--sample_cost_us", "100"});
  };

  std::vector<std::unique_ptr<Child>> workers;
  for (int w = 0; w < 2; ++w) workers.push_back(worker(w));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (workers[1]->Output().find("step 20 ") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(workers[1]->Stop(SIGKILL), 128 + SIGKILL);
  EXPECT_EQ(workers[0]->Wait(absl::Minutes(2)), 0) << workers[0]->Output();
  // The job is kSteps * kBatch samples: worker 0 went on past its share of
  // clocks until the ledger had every one applied.
  const testing::LedgerCheck ledger =
      testing::CheckLedger(STRATA_BINARY, address, dir, kSteps * kBatch);
  testing::ExpectAppliedOnce(ledger, kSteps * kBatch);
  cluster.Stop();
}

// A toy worker (StepSession, as a Python worker) reports its steps' times
// in its heartbeats: `strata status` shows them.
TEST(Cluster, StepSessionWorkersReportTheirStepTimes) {
  const std::string dir = testing::FreshDir("step-times");
  testing::TestCluster cluster(STRATA_BINARY, dir);
  const std::string address = cluster.address();
  ASSERT_FALSE(address.empty());
  std::unique_ptr<Child> worker =
      testing::ToyWorker(STRATA_BINARY, address, dir, 0, 1, 1000000, 8,
                         {"--dim", "16", "--sample_cost_us", "200"});
  static const std::regex kSteps(
      "worker \\d+ .* compute [0-9.]+ s/step \\([0-9.]+ ms/sample, spread "
      "\\d+%\\)  waited (\\d+)%, processors idle (\\d+)% \\(last ([1-9]\\d*) "
      "steps\\)");
  std::string out;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(60);
       !std::regex_search(out, kSteps) && absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(200))) {
    Child status({STRATA_BINARY, "status", "--scheduler", address},
                 dir + "/status.log");
    ASSERT_EQ(status.Wait(absl::Seconds(30)), 0) << status.Output();
    out = status.Output();
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, kSteps)) << out;
  // A step session does not measure its processors: its waits count idle.
  EXPECT_EQ(m[1], m[2]) << out;
  worker->Stop(SIGTERM);
  cluster.Stop();
}

// A worker computing at half speed gets about a third of each BSP step
// with two workers; the global batch stays what was set.
TEST(Cluster, BspSharesFollowEachWorkersSpeed) {
  const std::string dir = testing::FreshDir("throttle");
  // Heartbeats (a fifth of the lease) carry the speeds the splits follow:
  // several of them over the run, so one measured in a stall (a loaded
  // machine) does not decide the last steps' shares.
  testing::TestCluster cluster(STRATA_BINARY, dir, {"--lease_ms", "2000"});
  const std::string address = cluster.address();
  ASSERT_FALSE(address.empty());
  constexpr int kSteps = 120, kBatch = 48;
  // Each step leased as it comes: a split is made when it is leased, and
  // steps leased ahead (to train through a scheduler outage) would keep the
  // shares of the speeds known then.
  auto worker = [&](int w, const char* throttle) {
    return testing::ToyWorker(STRATA_BINARY, address, dir, w, 2, kSteps, kBatch,
                              {"--dim", "16", "--sample_cost_us", "400",
                               "--throttle", throttle, "--lease_ahead_s", "0"});
  };

  // The slow worker registers first: it has the lower member id.
  std::vector<std::unique_ptr<Child>> workers;
  workers.push_back(worker(0, "2"));
  absl::SleepFor(absl::Milliseconds(300));
  workers.push_back(worker(1, "1"));
  for (auto& w : workers)
    EXPECT_EQ(w->Wait(absl::Minutes(2)), 0) << w->Output();
  const testing::LedgerCheck ledger =
      testing::CheckLedger(STRATA_BINARY, address, dir, kSteps * kBatch);
  ASSERT_EQ(ledger.rc, 0) << ledger.output;
  EXPECT_EQ(ledger.samples, kSteps * kBatch) << ledger.output;
  // Per step, each member's samples (one record per unit).
  std::map<int64_t, std::map<uint64_t, int64_t>> shares;
  std::ifstream lines(dir + "/ledger.jsonl");
  static const std::regex kRecord(
      "\"ranges\":\\[\\[(\\d+),(\\d+)\\]\\],\"step\":(\\d+).*\"member\":(\\d+"
      ")");
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    ASSERT_TRUE(std::regex_search(line, m, kRecord)) << line;
    shares[std::stoll(m[3])][std::stoull(m[4])] +=
        std::stoll(m[2]) - std::stoll(m[1]);
  }
  ASSERT_EQ(shares.size(), static_cast<size_t>(kSteps));
  // The slow worker registered first (the lower id); on a loaded machine
  // its lease may have run out, and it registered again under a new id
  // (its scheduler client logs "now member N").
  std::optional<uint64_t> slow_id;
  static const std::regex kNewId("now member (\\d+)");
  const std::string slow_log = workers[0]->Output();
  for (auto it = std::sregex_iterator(slow_log.begin(), slow_log.end(), kNewId);
       it != std::sregex_iterator(); ++it) {
    slow_id = std::stoull((*it)[1]);
  }
  // Over the last 20 steps the slow worker averages about 16.
  double slow = 0;
  for (int64_t step = kSteps - 20; step < kSteps; ++step) {
    const auto& by_member = shares[step];
    ASSERT_EQ(by_member.size(), 2u) << "step " << step;
    int64_t total = 0;
    for (const auto& [id, n] : by_member) total += n;
    EXPECT_EQ(total, kBatch) << "step " << step;
    auto mine = slow_id ? by_member.find(*slow_id) : by_member.begin();
    ASSERT_NE(mine, by_member.end()) << "step " << step;
    slow += mine->second;
  }
  slow /= 20;
  EXPECT_GT(slow, 11.0);
  EXPECT_LT(slow, 21.0);
  cluster.Stop();
}

}  // namespace
}  // namespace strata
