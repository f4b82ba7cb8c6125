// The parameter server over real gRPC on 127.0.0.1, with a real scheduler
// and real RocksDB snapshots.
#include "server/parameter_server.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "common/clock.h"
#include "scheduler/scheduler.h"
#include "server/shard.h"
#include "storage/ram_tier.h"
#include "storage/spill_store.h"
#include "testing/server/ps_cluster.h"

namespace strata {
namespace {

using ::strata::testing::Cluster;
using ::strata::testing::Connect;
using ::strata::testing::Model;
using ::strata::testing::StartScheduler;
using ::strata::testing::StartServer;
using ::strata::testing::TempDir;
using ::strata::testing::TrainSteps;

TEST(ParameterServer, TrainsThroughTheClientAndCountsVersions) {
  Cluster c;
  c.scheduler = StartScheduler();
  auto server = StartServer(*c.scheduler, "");
  ASSERT_TRUE(server.ok()) << server.status();
  c.server = std::move(*server);
  Connect(c);
  // Initial weights follow the InitSpec, and are the same on every pull.
  std::vector<float> w0(250), w1(250);
  ASSERT_TRUE(c.ps->PullTensor(0, w0.data(), 0, 0).ok());
  ASSERT_TRUE(c.ps->PullTensor(0, w1.data(), 0, 0).ok());
  EXPECT_EQ(w0, w1);
  EXPECT_NE(w0[0], 0.0f);
  TrainSteps(*c.ps, 0, 5);
  auto stats = c.ps->Stats();
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->size(), 1u);
  EXPECT_EQ((*stats)[0].chunks(), 4u);  // w: 100+100+50, b: 3
  for (const auto& [id, version] : (*stats)[0].chunk_versions())
    EXPECT_EQ(version, 5u);
  ASSERT_TRUE(c.ps->PullTensor(0, w1.data(), 5, 5).ok());
  EXPECT_NE(w0, w1);
  // The async form: one handle per chunk (w is 100+100+50), each with the
  // version it read; an index outside the model fails its one handle.
  std::vector<float> w2(250);
  std::vector<OpHandle> ops = c.ps->PullTensorAsync(0, w2.data(), -1, 0);
  ASSERT_EQ(ops.size(), 3u);
  for (const OpHandle& op : ops) {
    ASSERT_TRUE(op.Wait().ok());
    EXPECT_EQ(op.version(), 5u);
  }
  EXPECT_EQ(w1, w2);
  std::vector<OpHandle> bad = c.ps->PushTensorAsync(2, w2.data(), 5, 1);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].Wait().code(), absl::StatusCode::kInvalidArgument);
}

// Trains 3 steps, snapshots, stops the server and starts another on its
// data directory: the restored state equals the saved one bit for bit. With
// a RAM budget (bytes) most tiles are on disk on both sides.
void ExpectSnapshotRestoreBitIdentical(uint64_t ram_budget) {
  const std::string dir = TempDir("snapshot" + std::to_string(ram_budget));
  std::unique_ptr<ChunkTier> before;
  {
    Cluster c;
    c.scheduler = StartScheduler();
    auto server = StartServer(*c.scheduler, dir, ram_budget);
    ASSERT_TRUE(server.ok()) << server.status();
    c.server = std::move(*server);
    Connect(c);
    TrainSteps(*c.ps, 0, 3);
    ASSERT_TRUE(c.ps->SnapshotAll(3).ok());
    // Copied into RAM: a capture of a spilling server lives on its spill
    // disk, which the next server on the directory empties.
    std::unique_ptr<ChunkTier> capture = c.server->shard().CaptureAll().value();
    auto copy = std::make_unique<RamTier>();
    ASSERT_TRUE(
        capture->ForEach([&](const ChunkRecord& r) { return copy->Put(r); })
            .ok());
    before = std::move(copy);
    if (ram_budget > 0) {
      v1::StatsResponse st;
      c.server->shard().FillStats(&st);
      EXPECT_GT(st.tier().spilled_bytes(), 0u);
      EXPECT_LE(st.tier().resident_bytes(), ram_budget + 1200);
    }
  }
  auto scheduler = StartScheduler();
  auto server = StartServer(*scheduler, dir, ram_budget);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->restored_step(), 3);
  std::unique_ptr<ChunkTier> after = (*server)->shard().CaptureAll().value();
  ASSERT_EQ(after->size(), before->size());
  ASSERT_TRUE(
      before
          ->ForEach([&](const ChunkRecord& a) -> absl::Status {
            auto b = after->Get(a.id);
            EXPECT_TRUE(b.ok());
            if (!b.ok()) return b.status();
            EXPECT_EQ(a.version, b->version);
            EXPECT_EQ(a.spec, b->spec);
            EXPECT_EQ(0, std::memcmp(a.weights.data(), b->weights.data(),
                                     a.weights.size() * 4));
            EXPECT_EQ(a.slots.size(), b->slots.size());
            for (size_t s = 0; s < a.slots.size() && s < b->slots.size(); ++s) {
              EXPECT_EQ(0, std::memcmp(a.slots[s].data(), b->slots[s].data(),
                                       a.slots[s].size() * 4));
            }
            return absl::OkStatus();
          })
          .ok());
}

TEST(ParameterServer, SnapshotRestoreIsBitIdentical) {
  ExpectSnapshotRestoreBitIdentical(0);
}

// w's tiles are 100 floats with Adam's two moments: 1200 bytes. A budget of
// one tile keeps two thirds of the state on disk.
TEST(ParameterServer, SnapshotRestoreOfASpilledServerIsBitIdentical) {
  ExpectSnapshotRestoreBitIdentical(1200);
}

// A spilled tile that comes back at another version (as from a corrupt or
// stale spill database) fails the pull that met it with DATA_LOSS and stops
// the server: serving on would serve, or apply a step without, that chunk;
// a restart restores the last snapshot.
TEST(ParameterServer, ALostSpilledTileStopsTheServer) {
  Cluster c;
  c.scheduler = StartScheduler();
  auto server = StartServer(*c.scheduler, TempDir("lost"), 1200);
  ASSERT_TRUE(server.ok()) << server.status();
  c.server = std::move(*server);
  Connect(c);
  TrainSteps(*c.ps, 0, 2);
  // Every tile's spilled copy replaced by one of another version. The
  // store is thread-safe; only this test writes to it from outside.
  SpillStore* spill = const_cast<SpillStore*>(c.server->shard().spill());
  ASSERT_NE(spill, nullptr);
  std::unique_ptr<ChunkTier> now = c.server->shard().CaptureAll().value();
  ASSERT_TRUE(now->ForEach([&](const ChunkRecord& r) {
                   ChunkRecord stale = r;
                   stale.version += 7;
                   return spill->Write(stale);
                 })
                  .ok());
  EXPECT_TRUE(c.server->fatal().ok());
  std::vector<float> w(250);
  const absl::Status pulled = c.ps->PullTensor(0, w.data(), 2, 2);
  EXPECT_EQ(pulled.code(), absl::StatusCode::kDataLoss) << pulled;
  absl::Status fatal;
  for (int i = 0; i < 500 && fatal.ok(); ++i) {
    fatal = c.server->fatal();
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(fatal.code(), absl::StatusCode::kDataLoss) << fatal;
  EXPECT_NE(fatal.message().find("restore its last snapshot"),
            std::string::npos)
      << fatal;
  c.server->Wait();  // returns once it has stopped
}

TEST(ParameterServer, ARamBudgetNeedsADataDir) {
  auto scheduler = StartScheduler();
  auto server = StartServer(*scheduler, "", 1 << 20);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(server.status().message().find("--data_dir"), std::string::npos)
      << server.status();
}

// --evict auto spills the tile used last under every consistency (it did
// better than lru end to end under SSP and ASP too: docs/BENCHMARKS.md).
TEST(ParameterServer, AutoEvictionSpillsTheTileUsedLastUnderEveryMode) {
  for (const char* mode : {"bsp", "ssp:2", "asp"}) {
    auto scheduler = StartScheduler(mode);
    auto server = StartServer(
        *scheduler, TempDir(absl::StrCat("evict-", std::string(1, mode[0]))),
        1 << 20);
    ASSERT_TRUE(server.ok()) << mode << ": " << server.status();
    const SpillStore* spill = (*server)->shard().spill();
    ASSERT_NE(spill, nullptr) << mode;
    EXPECT_EQ(spill->eviction(), SpillOptions::Eviction::kJustUsed) << mode;
    EXPECT_EQ(spill->prefetch_depth(), 0) << mode;
    EXPECT_FALSE(spill->write_behind()) << mode;
  }
}

TEST(ParameterServer, RefusesADataDirThatIsNotOurs) {
  const std::string dir = TempDir("foreign");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/precious.txt") << "not strata";
  auto scheduler = StartScheduler();
  auto server = StartServer(*scheduler, dir);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition)
      << server.status();
  EXPECT_TRUE(std::filesystem::exists(dir + "/precious.txt"));  // nothing lost
}

TEST(ParameterServer, RefusesAConsistencyOtherThanTheJobs) {
  auto scheduler = StartScheduler("asp");
  ServerOptions o;
  o.scheduler_address = scheduler->address();
  o.consistency = *ParseConsistency("bsp");
  EXPECT_EQ(ParameterServer::Start(o).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ParameterServer, PushFromANonMemberIsRefusedOverTheWire) {
  Cluster c;
  c.scheduler = StartScheduler();
  auto server = StartServer(*c.scheduler, "");
  ASSERT_TRUE(server.ok());
  c.server = std::move(*server);
  Connect(c);
  // A tool (ROLE_CLIENT) is not a worker of the view: its pushes are refused.
  SchedulerClientOptions to;
  to.scheduler_address = c.scheduler->address();
  to.role = v1::ROLE_CLIENT;
  auto tool = SchedulerClient::Connect(to);
  ASSERT_TRUE(tool.ok());
  auto ps = PsClient::Create(PsClientOptions(), tool->get());
  ASSERT_TRUE(ps.ok());
  ASSERT_TRUE((*ps)->RegisterModel(Model()).ok());  // idempotent
  std::vector<float> g(250, 1.0f);
  EXPECT_EQ((*ps)->PushTensor(0, g.data(), 0, 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(PsClient, RetriesWhileAServerRestartsAndFindsItsNewAddress) {
  const std::string dir = TempDir("retry");
  Cluster c;
  c.scheduler = StartScheduler();
  auto server = StartServer(*c.scheduler, dir);
  ASSERT_TRUE(server.ok()) << server.status();
  c.server = std::move(*server);
  Connect(c);
  TrainSteps(*c.ps, 0, 2);
  ASSERT_TRUE(c.ps->SnapshotAll(2).ok());
  std::vector<float> before(250);
  ASSERT_TRUE(c.ps->PullTensor(0, before.data(), 2, 2).ok());
  c.server.reset();  // the server goes away...
  std::vector<float> after(250, -1.0f);
  // ...a pull issued now fails UNAVAILABLE and is retried with backoff...
  OpHandle pull = c.ps->Pull(0, after.data(), 2, 2);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(pull.done());
  // ...until the server is back (another port, same data dir, same state).
  auto again = StartServer(*c.scheduler, dir);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(pull.Wait().ok()) << pull.Wait();
  EXPECT_EQ(pull.version(), 2u);
  EXPECT_EQ(0,
            std::memcmp(before.data(), after.data(), 100 * 4));  // chunk 0 of w
}

TEST(PsClient, HigherPriorityOperationsGoFirst) {
  auto scheduler = StartScheduler("asp");
  ServerOptions so;
  so.scheduler_address = scheduler->address();
  auto server = ParameterServer::Start(so);
  ASSERT_TRUE(server.ok());
  SchedulerClientOptions wo;
  wo.scheduler_address = scheduler->address();
  auto w1 = SchedulerClient::Connect(wo);
  auto w2 = SchedulerClient::Connect(wo);
  ASSERT_TRUE(w1.ok() && w2.ok());
  PsClientOptions one_at_a_time;
  one_at_a_time.max_in_flight_per_server = 1;
  auto a = PsClient::Create(one_at_a_time, w1->get());
  auto b = PsClient::Create(PsClientOptions(), w2->get());
  ASSERT_TRUE(a.ok() && b.ok());
  ModelSpec m = Model();
  m.chunk_bytes = 4 * 250;  // w is one chunk (index 0), b another (index 1)
  ASSERT_TRUE((*a)->RegisterModel(m).ok());
  ASSERT_TRUE((*b)->RegisterModel(m).ok());
  ASSERT_TRUE(
      (*w1)
          ->WaitForView([](const v1::View& v) { return v.workers_size() == 2; },
                        absl::Seconds(10))
          .ok());
  // Occupy a's only slot: a pull of w that waits for an update nobody made.
  std::vector<float> w(250), bias(3), w_seen(250), bias_seen(3);
  OpHandle blocker =
      (*a)->Pull(0, w.data(), -1, /*min_version=*/1, /*priority=*/100);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*server)->shard().counters().pulls_waiting.load() == 0 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ((*server)->shard().counters().pulls_waiting.load(), 1);
  std::vector<float> g_w(250, 1.0f), g_b(3, 1.0f);
  OpHandle low_push = (*a)->Push(1, g_b.data(), 0, 1, /*priority=*/1);
  OpHandle top_push = (*a)->Push(0, g_w.data(), 0, 1, /*priority=*/5);
  OpHandle mid_pull_w = (*a)->Pull(0, w_seen.data(), -1, 0, /*priority=*/3);
  OpHandle high_pull_b = (*a)->Pull(1, bias_seen.data(), -1, 0, /*priority=*/4);
  // Unblock from the other client.
  ASSERT_TRUE((*b)->PushTensor(0, g_w.data(), 0, 1).ok());
  for (OpHandle* op :
       {&blocker, &low_push, &top_push, &mid_pull_w, &high_pull_b}) {
    ASSERT_TRUE(op->Wait().ok()) << op->Wait();
  }
  // Order was: push w (5), pull b (4), pull w (3), push b (1).
  EXPECT_EQ(high_pull_b.version(), 0u);  // before the low-priority push of b
  EXPECT_EQ(mid_pull_w.version(), 2u);   // after both pushes of w
}

// The trainer starts a step while the previous one's Commit is in flight
// (forward runs over the next step's pulls): forgetting the new step's
// deferred counts keeps the earlier step's for its Commit. Were they lost,
// the Commit would reach no server, step 0 would never close, and the
// pull of step 1 would wait out the gate (10 s) and fail.
TEST(PsClient, ForgettingAStepsDeferredPushesKeepsAnEarlierStepsCounts) {
  Cluster c;
  testing::StartCluster(c);
  std::vector<float> w(250), g_w(250, 1.0f), g_b(3, 1.0f);
  const StepStamp deferred{.deferred = true};
  std::vector<OpHandle> ops =
      c.ps->PushTensorAsync(0, g_w.data(), 0, 4, 0, deferred);
  for (OpHandle& op : c.ps->PushTensorAsync(1, g_b.data(), 0, 4, 0, deferred))
    ops.push_back(op);
  ASSERT_TRUE(WaitAll(ops).ok());
  c.ps->ForgetDeferred(1);
  ASSERT_TRUE(c.ps->Commit(0, 0.5f).ok());
  std::vector<OpHandle> pull = c.ps->PullTensorAsync(0, w.data(), 1, 1);
  ASSERT_TRUE(WaitAll(pull).ok()) << WaitAll(pull);
  EXPECT_EQ(pull[0].version(), 1u);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(ParameterServer, StopsWhenARestartOnItsDataDirectorySupersedesIt) {
  SimulatedClock clock;
  SchedulerOptions so;
  so.num_shards = 1;
  so.lease = absl::Seconds(10);
  so.clock = &clock;
  auto scheduler = Scheduler::Start(so);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const std::string dir = TempDir("superseded");
  auto server = StartServer(**scheduler, dir);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string id;
  std::getline(std::ifstream(dir + "/DIR_ID"), id);
  ASSERT_EQ(id.size(), 32u);
  // Its lease runs out (as for a process paused past it), and a new process
  // on the same directory takes the slot.
  clock.Advance(absl::Seconds(11));
  (*scheduler)->CheckLeasesNow();
  SchedulerClientOptions restarted;
  restarted.scheduler_address = (*scheduler)->address();
  restarted.role = v1::ROLE_SERVER;
  restarted.address = "127.0.0.1:1";
  restarted.shard = 0;
  restarted.data_dir_id = id;
  auto other = SchedulerClient::Connect(restarted);
  ASSERT_TRUE(other.ok()) << other.status();
  // The old server's next heartbeat finds its lease gone; registering again
  // is refused, and it stops with the reason.
  (*server)->Wait();
  const absl::Status why = (*server)->fatal();
  EXPECT_EQ(why.code(), absl::StatusCode::kFailedPrecondition) << why;
  EXPECT_NE(why.message().find("superseded"), absl::string_view::npos) << why;
  EXPECT_EQ((*scheduler)->CurrentView().shard_map().slots(0).member_id(),
            (*other)->member_id());
}

}  // namespace
}  // namespace strata
