// Groups formed through a real scheduler's KV: a 3-rank Gloo group, its
// re-formation at a new epoch after a rank dies, and a rank that never
// comes.
#include "collective/kv_rendezvous.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/scheduler_client.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"

namespace strata {
namespace {

struct Cluster {
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::unique_ptr<SchedulerClient>> clients;
};

Cluster StartCluster(int workers) {
  Cluster cluster;
  auto scheduler = Scheduler::Start({});
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  if (!scheduler.ok()) return cluster;
  cluster.scheduler = *std::move(scheduler);
  for (int i = 0; i < workers; ++i) {
    SchedulerClientOptions options;
    options.scheduler_address = cluster.scheduler->address();
    auto client = SchedulerClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    if (client.ok()) cluster.clients.push_back(*std::move(client));
  }
  return cluster;
}

// Ranks 0..n-1 (clients[0..n-1]) join group `name` at `epoch` at once.
std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> JoinAll(
    Cluster& cluster, int n, uint64_t epoch,
    absl::Duration connect_timeout = absl::Seconds(30)) {
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> comms;
  for (int r = 0; r < n; ++r)
    comms.emplace_back(absl::UnknownError("not joined"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions options;
      options.rank = r;
      options.size = n;
      options.connect_timeout = connect_timeout;
      options.comm.timeout = absl::Seconds(20);
      comms[r] = JoinGlooGroup(cluster.clients[r].get(), "dp", epoch, options);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Every rank all-reduces {rank+1}; each must get n(n+1)/2.
void ExpectAllReduceWorks(
    std::vector<absl::StatusOr<std::unique_ptr<Communicator>>>& comms) {
  std::vector<std::thread> threads;
  const int n = int(comms.size());
  for (auto& comm : comms) {
    ASSERT_TRUE(comm.ok()) << comm.status();
    threads.emplace_back([c = comm->get(), n] {
      std::vector<float> data = {float(c->rank() + 1)};
      ASSERT_TRUE(c->AllReduce(absl::MakeSpan(data), ReduceOp::kSum).ok());
      EXPECT_EQ(data[0], float(n * (n + 1) / 2));
    });
  }
  for (auto& t : threads) t.join();
}

TEST(KvRendezvous, RanksFindEachOtherThroughTheSchedulersKv) {
  Cluster cluster = StartCluster(3);
  ASSERT_EQ(cluster.clients.size(), 3u);
  auto comms = JoinAll(cluster, 3, /*epoch=*/1);
  ExpectAllReduceWorks(comms);
  // Each rank published its address under the group's epoch prefix.
  auto key = cluster.clients[0]->KvGet(GroupPrefix("dp", 1) + "rank_0",
                                       absl::ZeroDuration());
  auto any = cluster.clients[0]->KvGet(GroupPrefix("dp", 1) + "0",
                                       absl::ZeroDuration());
  EXPECT_TRUE(key.ok() || any.ok()) << key.status() << " / " << any.status();
}

// Once a group has formed, the keys of the groups before it go: earlier
// epochs of its name (9 sorts before 10), and older names of its family;
// its own keys and other families' stay.
TEST(KvRendezvous, AFormedGroupForgetsTheGroupsBeforeIt) {
  Cluster cluster = StartCluster(1);
  ASSERT_EQ(cluster.clients.size(), 1u);
  SchedulerClient& kv = *cluster.clients[0];
  const std::vector<std::string> gone = {GroupPrefix("dp-g1", 9) + "rank_0",
                                         GroupPrefix("dp-g1", 3) + "rank_1",
                                         GroupPrefix("dp-g0", 12) + "rank_0"};
  const std::vector<std::string> kept = {
      GroupPrefix("dp-g1", 10) + "rank_0", GroupPrefix("dp-g1", 11) + "rank_0",
      GroupPrefix("dp-g2", 1) + "rank_0", GroupPrefix("tp", 1) + "rank_0"};
  for (const auto& keys : {gone, kept}) {
    for (const std::string& k : keys) ASSERT_TRUE(kv.KvPut(k, "x").ok());
  }
  auto deleted = ForgetGroupsBefore(&kv, "dp-g", "dp-g1", 10);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, gone.size());
  for (const std::string& k : gone) {
    EXPECT_TRUE(absl::IsNotFound(kv.KvGet(k, absl::ZeroDuration()).status()))
        << k;
  }
  for (const std::string& k : kept) {
    EXPECT_TRUE(kv.KvGet(k, absl::ZeroDuration()).ok()) << k;
  }
  // A key deleted and put again starts over.
  EXPECT_EQ(*kv.KvCompareAndSet(gone[0], "y", 0), 1u);
}

TEST(KvRendezvous, SurvivorsOfADeadRankReformAtTheNextEpoch) {
  Cluster cluster = StartCluster(3);
  ASSERT_EQ(cluster.clients.size(), 3u);
  auto comms = JoinAll(cluster, 3, 1);
  ExpectAllReduceWorks(comms);
  comms[2]->reset();  // rank 2 dies: its connections close
  std::vector<std::thread> survivors;
  for (int r = 0; r < 2; ++r) {
    survivors.emplace_back([c = comms[r]->get()] {
      std::vector<float> data(1000, 1);
      absl::Status status = c->AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
      EXPECT_FALSE(status.ok()) << "rank " << c->rank();
    });
  }
  for (auto& t : survivors) t.join();
  auto reformed = JoinAll(cluster, 2, 2);
  ExpectAllReduceWorks(reformed);
}

TEST(KvRendezvous, ARankThatNeverComesIsDeadlineExceeded) {
  Cluster cluster = StartCluster(1);
  ASSERT_EQ(cluster.clients.size(), 1u);
  GlooOptions options;
  options.rank = 0;
  options.size = 2;
  options.connect_timeout = absl::Milliseconds(500);
  auto comm = JoinGlooGroup(cluster.clients[0].get(), "dp", 7, options);
  EXPECT_TRUE(absl::IsDeadlineExceeded(comm.status())) << comm.status();
  EXPECT_NE(comm.status().message().find("group of 2"), std::string::npos)
      << comm.status();
}

}  // namespace
}  // namespace strata
