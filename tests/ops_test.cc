// Operations end to end, with the real binary: every role serves gRPC
// health and Prometheus metrics whose counters move as a job trains,
// `strata status` shows each member's health, step and share, `strata
// health` answers container health checks, and a worker stopped with
// SIGTERM leaves the job cleanly (no lease runs out) while one killed
// with SIGKILL is counted as a lease expiry.
#include <signal.h>

#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics_http.h"
#include "gtest/gtest.h"
#include "tests/process_util.h"

namespace strata {
namespace {

using testing::Child;

// The address in a "metrics on http://<address>/metrics" log line of
// `child`, waiting up to 30 s for it.
std::string MetricsAddressOf(const Child& child) {
  static const std::regex kLine("metrics on http://([0-9.:]+)/metrics");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    std::smatch m;
    const std::string out = child.Output();
    if (std::regex_search(out, m, kLine)) return m[1];
    absl::SleepFor(absl::Milliseconds(50));
  }
  return "";
}

// The value of `series` at `address`, or -1 when it cannot be read.
double Sample(const std::string& address, const std::string& series) {
  absl::StatusOr<std::string> text = ScrapeMetrics(address);
  if (!text.ok()) return -1;
  absl::StatusOr<double> v = SampleValue(*text, series);
  return v.ok() ? *v : -1;
}

// Polls until `series` at `address` reaches `at_least` (within 60 s).
bool Reaches(const std::string& address, const std::string& series,
             double at_least) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    if (Sample(address, series) >= at_least) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

std::string RunCli(const std::vector<std::string>& args, const std::string& log,
                   int* rc) {
  Child c(args, log);
  *rc = c.Wait(absl::Seconds(30));
  return c.Output();
}

std::unique_ptr<Child> GptWorker(const std::string& address,
                                 const std::string& dir, int n) {
  const std::string corpus = dir + "/corpus.txt";
  if (!std::ifstream(corpus)) {
    std::ofstream f(corpus);
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps. ";
  }
  // Runs until stopped: far more steps than the test waits for.
  return std::make_unique<Child>(
      std::vector<std::string>{
          STRATA_BINARY, "worker",      "--scheduler",    address,
          "--layers",    "1",           "--heads",        "2",
          "--width",     "16",          "--context",      "16",
          "--data",      corpus,        "--batch",        "4",
          "--steps",     "1000000",     "--eval_every",   "0",
          "--listen",    "127.0.0.1:0", "--metrics_port", "0"},
      absl::StrCat(dir, "/worker", n, ".log"));
}

TEST(Ops, EveryRoleServesHealthAndMetricsThatMoveAsAJobTrains) {
  const std::string dir = testing::FreshDir("ops");
  Child scheduler(
      {STRATA_BINARY, "scheduler", "--listen", "127.0.0.1:0", "--num_shards",
       "2", "--address_file", dir + "/addr", "--metrics_port", "0"},
      dir + "/scheduler.log");
  const std::string address = testing::WaitForLine(dir + "/addr");
  ASSERT_FALSE(address.empty()) << scheduler.Output();
  const std::string scheduler_metrics = MetricsAddressOf(scheduler);
  ASSERT_FALSE(scheduler_metrics.empty()) << scheduler.Output();
  std::vector<std::unique_ptr<Child>> servers;
  for (int s = 0; s < 2; ++s) {
    servers.push_back(std::make_unique<Child>(
        std::vector<std::string>{STRATA_BINARY, "server", "--scheduler",
                                 address, "--shard", std::to_string(s),
                                 "--metrics_port", "0", "--data_dir",
                                 absl::StrCat(dir, "/server", s)},
        absl::StrCat(dir, "/server", s, ".log")));
  }
  const std::string server_metrics = MetricsAddressOf(*servers[0]);
  ASSERT_FALSE(server_metrics.empty()) << servers[0]->Output();
  auto a = GptWorker(address, dir, 0);
  auto b = GptWorker(address, dir, 1);
  const std::string a_metrics = MetricsAddressOf(*a);
  ASSERT_FALSE(a_metrics.empty()) << a->Output();

  // Counters move while the job trains.
  ASSERT_TRUE(Reaches(a_metrics, "strata_worker_steps_total", 5))
      << a->Output();
  const double steps = Sample(a_metrics, "strata_worker_steps_total");
  const std::string ok_pushes =
      "strata_server_requests_total{method=\"push\",code=\"OK\"}";
  const double pushes = Sample(server_metrics, ok_pushes);
  EXPECT_GT(pushes, 0);
  EXPECT_TRUE(Reaches(a_metrics, "strata_worker_steps_total", steps + 5));
  EXPECT_TRUE(Reaches(server_metrics, ok_pushes, pushes + 5));
  EXPECT_GT(
      Sample(server_metrics, "strata_server_bytes_total{direction=\"in\"}"), 0);
  EXPECT_GT(Sample(server_metrics,
                   "strata_server_request_seconds_count{method="
                   "\"pull\"}"),
            0);
  EXPECT_GT(Sample(server_metrics, "strata_data_dir_bytes"), 0);
  EXPECT_GT(Sample(server_metrics, "process_resident_memory_bytes"), 0);
  EXPECT_GT(Sample(a_metrics, "strata_worker_tokens_per_second"), 0);
  EXPECT_GT(Sample(a_metrics, "strata_worker_compute_seconds_count"), 0);
  // Worker a can take its first steps alone, before b has joined.
  EXPECT_TRUE(Reaches(scheduler_metrics, "strata_members{role=\"worker\"}", 2));
  EXPECT_EQ(Sample(scheduler_metrics, "strata_members{role=\"worker\"}"), 2);
  EXPECT_EQ(Sample(scheduler_metrics, "strata_members{role=\"server\"}"), 2);

  // `strata status`: every member's health; each worker's step and share.
  int rc = 0;
  std::string out = RunCli({STRATA_BINARY, "status", "--scheduler", address},
                           dir + "/status.log", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("scheduler " + address + "  SERVING"), std::string::npos)
      << out;
  const std::regex kWorker(
      "worker \\d+  SERVING  step (\\d+)  [0-9.]+ samples/s  share "
      "([0-9.]+)  tokens/s (\\d+)  loss [0-9.]+");
  int workers = 0;
  double shares = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), kWorker), end; it != end;
       ++it) {
    ++workers;
    shares += std::stod((*it)[2]);
  }
  EXPECT_EQ(workers, 2) << out;
  EXPECT_NEAR(shares, 1.0, 0.02) << out;
  // And each worker's last steps, once its heartbeats brought them.
  const std::regex kSteps(
      "share [0-9.]+  tokens/s \\d+  loss [0-9.]+  compute [0-9.]+ s/step "
      "\\([0-9.]+ ms/sample, spread \\d+%\\)  waited \\d+%, processors idle "
      "\\d+% \\(last "
      "([1-9]\\d*) steps\\)");
  auto with_steps = [&] {
    return std::distance(std::sregex_iterator(out.begin(), out.end(), kSteps),
                         std::sregex_iterator());
  };
  // The scheduler's consistency rule, once each worker reported 8 steps.
  const std::regex kAdvice("\nconsistency advice (bsp|ssp:[1-9]|asp): \\S");
  auto advised = [&] { return std::regex_search(out, kAdvice); };
  // Each worker's payloads: in its own tensor region at both servers (on
  // this host, which each server maps), once attached there.
  const std::regex kWire("\n    wire region 2\n");
  auto in_region = [&] {
    return std::distance(std::sregex_iterator(out.begin(), out.end(), kWire),
                         std::sregex_iterator());
  };
  for (const absl::Time deadline = absl::Now() + absl::Seconds(60);
       (with_steps() < 2 || !advised() || in_region() < 2) &&
       absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(200));
    out = RunCli({STRATA_BINARY, "status", "--scheduler", address},
                 dir + "/status.log", &rc);
  }
  EXPECT_EQ(with_steps(), 2) << out;
  EXPECT_TRUE(advised()) << out;
  EXPECT_EQ(in_region(), 2) << out;
  const std::regex kServer("shard \\d  [0-9.:]+  SERVING  chunks [1-9]");
  EXPECT_EQ(std::distance(std::sregex_iterator(out.begin(), out.end(), kServer),
                          std::sregex_iterator()),
            2)
      << out;

  // `strata health`: exit 0 when SERVING; a clear error naming the address
  // when nothing answers.
  out = RunCli({STRATA_BINARY, "health", "--address", address},
               dir + "/health.log", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("SERVING"), std::string::npos) << out;
  out = RunCli(
      {STRATA_BINARY, "health", "--address", "127.0.0.1:1", "--timeout_s", "1"},
      dir + "/health_none.log", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("health of 127.0.0.1:1"), std::string::npos) << out;

  // SIGTERM: the worker leaves after its step, exits 0, and no lease runs
  // out; the other goes on alone.
  EXPECT_EQ(b->Stop(SIGTERM), 0) << b->Output();
  EXPECT_NE(b->Output().find("left the job"), std::string::npos) << b->Output();
  EXPECT_TRUE(Reaches(scheduler_metrics, "strata_members{role=\"worker\"}", 1));
  EXPECT_EQ(Sample(scheduler_metrics, "strata_members{role=\"worker\"}"), 1);
  EXPECT_EQ(Sample(scheduler_metrics, "strata_lease_expiries_total"), 0);
  EXPECT_TRUE(Reaches(a_metrics, "strata_worker_steps_total",
                      Sample(a_metrics, "strata_worker_steps_total") + 5))
      << a->Output();

  // SIGKILL: its lease runs out, and the scheduler counts it.
  auto c = GptWorker(address, dir, 2);
  const std::string c_metrics = MetricsAddressOf(*c);
  ASSERT_TRUE(Reaches(c_metrics, "strata_worker_steps_total", 2))
      << c->Output();
  c->Stop(SIGKILL);
  EXPECT_TRUE(Reaches(scheduler_metrics, "strata_lease_expiries_total", 1));
  EXPECT_TRUE(Reaches(a_metrics, "strata_worker_steps_total",
                      Sample(a_metrics, "strata_worker_steps_total") + 5))
      << a->Output();

  EXPECT_EQ(a->Stop(SIGTERM), 0) << a->Output();
  for (auto& s : servers) EXPECT_EQ(s->Stop(), 0) << s->Output();
  EXPECT_EQ(scheduler.Stop(), 0) << scheduler.Output();
}

// `strata status` of an MoE job: each worker's load per expert of each MoE
// layer in its last step (every token kept: the capacity holds them all),
// and the share of a dense sync's expert bytes it moved.
TEST(Ops, StatusShowsEachExpertsLoad) {
  const std::string dir = testing::FreshDir("ops-moe");
  testing::TestCluster cluster(STRATA_BINARY, dir);
  ASSERT_FALSE(cluster.address().empty());
  const std::string corpus = dir + "/corpus.txt";
  {
    std::ofstream f(corpus);
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps. ";
  }
  Child worker(
      {STRATA_BINARY, "worker",      "--scheduler",    cluster.address(),
       "--layers",    "1",           "--heads",        "2",
       "--width",     "16",          "--context",      "16",
       "--data",      corpus,        "--batch",        "4",
       "--experts",   "16",          "--top_k",        "1",
       "--moe_every", "1",           "--capacity",     "16",
       "--steps",     "1000000",     "--eval_every",   "0",
       "--listen",    "127.0.0.1:0", "--metrics_port", "0"},
      dir + "/worker.log");
  const std::string metrics = MetricsAddressOf(worker);
  ASSERT_FALSE(metrics.empty()) << worker.Output();
  ASSERT_TRUE(Reaches(metrics, "strata_worker_steps_total", 3))
      << worker.Output();
  int rc = 0;
  const std::string out =
      RunCli({STRATA_BINARY, "status", "--scheduler", cluster.address()},
             dir + "/status.log", &rc);
  ASSERT_EQ(rc, 0) << out;
  std::smatch load;
  ASSERT_TRUE(std::regex_search(out, load,
                                std::regex("layer 0 load:((?: \\d+){16})\n")))
      << out;
  int tokens = 0, idle = 0;
  std::istringstream row(load[1].str());
  for (int n; row >> n;) {
    tokens += n;
    idle += n == 0;
  }
  EXPECT_EQ(tokens, 4 * 16) << out;  // batch x context, top-1, none dropped
  std::smatch share;
  ASSERT_TRUE(std::regex_search(
      out, share,
      std::regex("experts: pulled ([0-9.]+)% and pushed ([0-9.]+)% of a "
                 "dense sync's bytes")))
      << out;
  EXPECT_GT(std::stod(share[2]), 0) << out;
  EXPECT_LE(std::stod(share[2]), 100) << out;
  EXPECT_LE(std::stod(share[1]), 100) << out;
  if (idle > 0) {
    EXPECT_LT(std::stod(share[2]), 100) << out;
  }
  EXPECT_EQ(worker.Stop(SIGTERM), 0) << worker.Output();
  cluster.Stop();
}

}  // namespace
}  // namespace strata
