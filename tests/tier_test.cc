// A real `strata server` with a RAM budget holding a model whose state is
// six times the budget: its resident memory (the kernel's count, from
// /proc) stays within the budget plus the stated overhead, where the same
// server without a budget grows by the whole state; and it is killed with
// SIGKILL mid-run and restarts from its snapshot bit for bit.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "tests/process_util.h"

namespace strata {
namespace {

using testing::Child;

constexpr uint64_t kParams = 16ull << 20;  // 16M: 192 MiB with Adam
constexpr uint64_t kBudget = 32ull << 20;
constexpr uint64_t kChunkBytes = 1ull << 20;  // tiles of 3 MiB
// Outside the budget (docs/OPERATIONS.md): the spill database's memtables
// (2 x 8 MiB), the flushes' O_DIRECT write buffers (4 MiB per file being
// written), tiles in motion (read and decoded, encoded for a write, in
// a request: 3 MiB each, about 16 at once with the handler and read-ahead
// threads), gRPC's buffers and the allocator's (up to 64 MiB of free heap
// kept): 144 MiB, with room for more of them in flight on a busier
// machine. Measured on the build machine: 128-154 MiB of growth in all
// (with two flushes at once; 123-134 with one); the run without a budget
// grows by 263-274 MiB (the 192 MiB state and more), past this bound.
constexpr uint64_t kOverhead = 144ull << 20;

// A /proc/<pid>/status field in bytes (VmRSS, VmHWM).
uint64_t ProcBytes(pid_t pid, const std::string& field) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0)
      return std::stoull(line.substr(field.size() + 1)) * 1024;  // kB
  }
  ADD_FAILURE() << "no " << field << " for " << pid;
  return 0;
}

ModelSpec BigModel() {
  ModelSpec m;
  m.chunk_bytes = kChunkBytes;
  m.tensors.push_back({"w", {static_cast<int64_t>(kParams)}, "adam"});
  v1::InitSpec normal;
  normal.set_kind(v1::InitSpec::NORMAL);
  normal.set_scale(0.02f);
  m.inits = {normal};
  v1::GroupSpec g;
  g.set_name("adam");
  g.mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAM);
  g.mutable_optimizer()->set_lr(1e-3f);
  m.groups.push_back(g);
  return m;
}

struct Job {
  std::unique_ptr<Child> scheduler, server;
  std::unique_ptr<SchedulerClient> member;
  std::unique_ptr<PsClient> ps;
  std::string address;
};

// A `strata server` on <dir>/server; with `disk_mib` > 0, that directory
// is a tmpfs of that size in the server's own user and mount namespaces
// (a full disk without privileges).
std::unique_ptr<Child> Server(const std::string& dir, const std::string& addr,
                              bool budget, int start, int disk_mib = 0) {
  std::vector<std::string> args = {STRATA_BINARY, "server",       "--scheduler",
                                   addr,          "--shard",      "0",
                                   "--data_dir",  dir + "/server"};
  if (budget) {
    args.insert(args.end(), {"--ram_budget", std::to_string(kBudget)});
  }
  if (disk_mib > 0) {
    std::filesystem::create_directories(dir + "/server");
    std::string command = absl::StrCat("mount -t tmpfs -o size=", disk_mib,
                                       "m tmpfs ", dir, "/server && exec");
    for (const std::string& a : args) absl::StrAppend(&command, " ", a);
    args = {"/usr/bin/unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "/bin/sh",
            "-c",
            command};
  }
  return std::make_unique<Child>(args,
                                 absl::StrCat(dir, "/server", start, ".log"));
}

// Whether this machine lets an unprivileged process mount a tmpfs in its
// own namespaces.
bool CanMountTmpfs() {
  return std::system(
             "/usr/bin/unshare --user --map-root-user --mount /bin/sh "
             "-c 'mount -t tmpfs -o size=1m tmpfs /tmp' "
             ">/dev/null 2>&1") == 0;
}

// A scheduler, one server and this process as the one worker.
void StartJob(Job& job, const std::string& dir, bool budget, int disk_mib = 0) {
  job.scheduler = std::make_unique<Child>(
      std::vector<std::string>{STRATA_BINARY, "scheduler", "--listen",
                               "127.0.0.1:0", "--num_shards", "1", "--lease_ms",
                               "800", "--address_file", dir + "/addr"},
      dir + "/scheduler.log");
  job.address = testing::WaitForLine(dir + "/addr");
  ASSERT_FALSE(job.address.empty()) << job.scheduler->Output();
  job.server = Server(dir, job.address, budget, 0, disk_mib);
  SchedulerClientOptions so;
  so.scheduler_address = job.address;
  auto member = SchedulerClient::Connect(so);
  ASSERT_TRUE(member.ok()) << member.status();
  job.member = std::move(*member);
  // Serving and registered: its RSS from here on is the tier's doing.
  ASSERT_TRUE(job.member
                  ->WaitForView(
                      [](const v1::View& v) {
                        return v.servers_size() == 1 && v.workers_size() == 1;
                      },
                      absl::Seconds(30))
                  .ok());
  absl::SleepFor(absl::Milliseconds(300));
  PsClientOptions po;
  po.shared_memory = false;  // the server's RSS counts tiles, not a window
  auto ps = PsClient::Create(po, job.member.get());
  ASSERT_TRUE(ps.ok()) << ps.status();
  job.ps = std::move(*ps);
}

// Pulls and pushes `steps` steps from `first` (BSP, this one worker).
void Train(PsClient& ps, int64_t first, int64_t steps) {
  std::vector<float> w(kParams);
  for (int64_t t = first; t < first + steps; ++t) {
    ASSERT_TRUE(ps.PullTensor(0, w.data(), t, t).ok());
    for (size_t i = 0; i < w.size(); i += 97) w[i] = 0.01f * (i % 7) - w[i];
    ASSERT_TRUE(ps.PushTensor(0, w.data(), t, 1).ok());
  }
}

// The server's RSS growth from registration through 3 steps.
uint64_t PeakGrowth(bool budget, const std::string& name) {
  const std::string dir = testing::FreshDir(name);
  Job job;
  StartJob(job, dir, budget);
  if (::testing::Test::HasFatalFailure()) return 0;
  const uint64_t before = ProcBytes(job.server->pid(), "VmRSS");
  EXPECT_TRUE(job.ps->RegisterModel(BigModel()).ok());
  Train(*job.ps, 0, 3);
  const uint64_t peak = ProcBytes(job.server->pid(), "VmHWM");
  job.ps.reset();
  job.member.reset();
  EXPECT_EQ(job.server->Stop(), 0) << job.server->Output();
  EXPECT_EQ(job.scheduler->Stop(), 0) << job.scheduler->Output();
  return peak - before;
}

TEST(Tier, AServersResidentMemoryStaysWithinItsBudget) {
  const uint64_t state = kParams * 12;
  const uint64_t with = PeakGrowth(true, "tier_rss_budget");
  const uint64_t without = PeakGrowth(false, "tier_rss_plain");
  std::printf(
      "peak RSS growth: %llu MiB with a %llu MiB budget, %llu MiB "
      "without (state %llu MiB)\n",
      static_cast<unsigned long long>(with >> 20),
      static_cast<unsigned long long>(kBudget >> 20),
      static_cast<unsigned long long>(without >> 20),
      static_cast<unsigned long long>(state >> 20));
  EXPECT_LE(with, kBudget + kOverhead)
      << "peak RSS growth " << (with >> 20) << " MiB with a budget of "
      << (kBudget >> 20) << " MiB";
  // Not vacuous: without the budget the same run holds the whole state.
  EXPECT_GE(without, state)
      << "peak RSS growth " << (without >> 20) << " MiB without a budget";
}

TEST(Tier, ASpilledServerKilledMidRunRestoresItsSnapshotBitForBit) {
  const std::string dir = testing::FreshDir("tier_kill");
  Job job;
  StartJob(job, dir, /*budget=*/true);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(job.ps->RegisterModel(BigModel()).ok());
  Train(*job.ps, 0, 2);
  ASSERT_TRUE(job.ps->SnapshotAll(2).ok());
  std::vector<float> at2(kParams);
  ASSERT_TRUE(job.ps->PullTensor(0, at2.data(), 2, 2).ok());
  Train(*job.ps, 2, 1);  // a step the snapshot does not hold
  EXPECT_EQ(job.server->Stop(SIGKILL), 128 + SIGKILL);
  auto restarted = Server(dir, job.address, true, 1);
  // The job rolls back to step 2, which the restarted server restored from
  // its snapshot (the rest of its state spilled again as it loaded).
  std::vector<float> w(kParams);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::Status pulled;
  do {
    absl::SleepFor(absl::Milliseconds(200));
    pulled = job.ps->PullTensor(0, w.data(), -1, 0);
  } while (!pulled.ok() && absl::Now() < deadline);
  ASSERT_TRUE(pulled.ok()) << pulled << "\n" << restarted->Output();
  EXPECT_NE(restarted->Output().find("restored snapshot of step 2"),
            std::string::npos)
      << restarted->Output();
  EXPECT_TRUE(w == at2) << "restored weights differ from step 2's";
  job.ps.reset();
  job.member.reset();
  EXPECT_EQ(restarted->Stop(), 0) << restarted->Output();
  EXPECT_EQ(job.scheduler->Stop(), 0) << job.scheduler->Output();
}

// `strata status` shows the tier's bandwidth over a second while a job
// moves tiles.
TEST(Tier, StatusShowsTheSpillDisksBandwidthNow) {
  const std::string dir = testing::FreshDir("tier_status");
  Job job;
  StartJob(job, dir, /*budget=*/true);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(job.ps->RegisterModel(BigModel()).ok());
  std::atomic<bool> stop{false};
  std::thread trainer([&] {
    for (int64_t t = 0; !stop.load() && !HasFailure(); ++t) {
      Train(*job.ps, t, 1);
    }
  });
  Child status({STRATA_BINARY, "status", "--scheduler", job.address},
               dir + "/status.log");
  const int code = status.Wait(absl::Seconds(30));
  stop = true;
  trainer.join();
  ASSERT_EQ(code, 0) << status.Output();
  const std::string out = status.Output();
  double read_mib = 0, read_rate = -1, written_mib = 0, write_rate = -1;
  const size_t at = out.find("  read ");
  ASSERT_NE(at, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + at,
                        "  read %lf MiB (%lf MB/s now)  written %lf MiB (%lf "
                        "MB/s now)",
                        &read_mib, &read_rate, &written_mib, &write_rate),
            4)
      << out;
  // Every step reads and writes most of the 192 MiB of state through the
  // 32 MiB budget.
  EXPECT_GT(read_mib, 0) << out;
  EXPECT_GT(read_rate + write_rate, 0) << out;
  job.ps.reset();
  job.member.reset();
  EXPECT_EQ(job.server->Stop(), 0) << job.server->Output();
  EXPECT_EQ(job.scheduler->Stop(), 0) << job.scheduler->Output();
}

TEST(Tier, AFullSpillDiskRefusesNewChunksAndTheServerStaysWhole) {
  if (!CanMountTmpfs()) GTEST_SKIP() << "no unprivileged tmpfs mounts here";
  const std::string dir = testing::FreshDir("tier_full_disk");
  Job job;
  // 48 MiB of disk for 192 MiB of state over a 32 MiB budget.
  StartJob(job, dir, /*budget=*/true, /*disk_mib=*/48);
  ASSERT_FALSE(HasFatalFailure());
  absl::Status registered = job.ps->RegisterModel(BigModel());
  EXPECT_EQ(registered.code(), absl::StatusCode::kResourceExhausted)
      << registered;
  EXPECT_NE(registered.message().find("spill disk refused"), std::string::npos)
      << registered;
  // A retry is refused the same way (the chunks admitted stay admitted).
  registered = job.ps->RegisterModel(BigModel());
  EXPECT_EQ(registered.code(), absl::StatusCode::kResourceExhausted)
      << registered;
  // Still running, and it stops cleanly (exit 0: no crash on the way).
  job.ps.reset();
  job.member.reset();
  EXPECT_EQ(job.server->Stop(), 0) << job.server->Output();
  EXPECT_EQ(job.scheduler->Stop(), 0) << job.scheduler->Output();
}

}  // namespace
}  // namespace strata
