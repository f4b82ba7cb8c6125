// Replicated slots over real gRPC on 127.0.0.1: a real scheduler with
// --replicas 2, a primary and a backup server, a worker's client. The
// backup holds what the primary acknowledged, bit for bit, and serves on
// when the primary leaves. Parameter: payloads through shared memory (the
// primary forwards a copy in a message) or in messages (forwarded as they
// came).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "scheduler/scheduler.h"
#include "server/parameter_server.h"
#include "server/shard.h"
#include "storage/chunk_tier.h"
#include "strata/v1/ps.grpc.pb.h"
#include "testing/server/ps_cluster.h"

namespace strata {
namespace {

using ::strata::testing::Cluster;
using ::strata::testing::Connect;
using ::strata::testing::StartServer;
using ::strata::testing::TrainSteps;

std::unique_ptr<Scheduler> StartReplicatedScheduler() {
  SchedulerOptions so;
  so.num_shards = 1;
  so.replicas = 2;
  auto s = Scheduler::Start(so);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// Every chunk of `a` is in `b` with the same version, weights and
// optimizer state, bit for bit.
void ExpectSameState(Shard& a, Shard& b) {
  std::unique_ptr<ChunkTier> left = a.CaptureAll().value();
  std::unique_ptr<ChunkTier> right = b.CaptureAll().value();
  ASSERT_EQ(left->size(), right->size());
  ASSERT_GT(left->size(), 0u);
  ASSERT_TRUE(
      left->ForEach([&](const ChunkRecord& x) -> absl::Status {
            auto y = right->Get(x.id);
            EXPECT_TRUE(y.ok()) << x.id;
            if (!y.ok()) return y.status();
            EXPECT_EQ(x.version, y->version);
            EXPECT_EQ(0, std::memcmp(x.weights.data(), y->weights.data(),
                                     x.weights.size() * 4));
            EXPECT_EQ(x.slots.size(), y->slots.size());
            for (size_t s = 0; s < x.slots.size() && s < y->slots.size(); ++s) {
              EXPECT_EQ(0, std::memcmp(x.slots[s].data(), y->slots[s].data(),
                                       x.slots[s].size() * 4));
            }
            return absl::OkStatus();
          })
          .ok());
}

// The forwards `s` counted, as its Stats RPC answers.
uint64_t Forwards(ParameterServer& s) {
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(s.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::StatsResponse st;
  EXPECT_TRUE(stub->Stats(&ctx, v1::StatsRequest(), &st).ok());
  return st.replica_forwards();
}

class Replicas : public ::testing::TestWithParam<bool> {};

TEST_P(Replicas, BackupHoldsWhatThePrimaryAckedAndTakesOver) {
  Cluster c;
  c.scheduler = StartReplicatedScheduler();
  auto primary = StartServer(*c.scheduler, "");
  ASSERT_TRUE(primary.ok()) << primary.status();
  auto backup = StartServer(*c.scheduler, "");
  ASSERT_TRUE(backup.ok()) << backup.status();
  const v1::View view = c.scheduler->CurrentView();
  ASSERT_EQ(view.shard_map().slots(0).backups_size(), 1);
  EXPECT_EQ(view.shard_map().slots(0).address(), (*primary)->address());
  c.server = std::move(*primary);
  PsClientOptions options;
  options.shared_memory = GetParam();
  Connect(c, options);

  TrainSteps(*c.ps, 0, 5);
  ExpectSameState(c.server->shard(), (*backup)->shard());
  EXPECT_GE(Forwards(*c.server), 5u * 4);  // at least 4 chunk pushes a step
  EXPECT_EQ(Forwards(**backup), 0u);       // a backup forwards nothing
  auto stats = c.ps->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  if (GetParam()) {
    EXPECT_GT((*stats)[0].shm_payloads(), 0u);
  }

  // The primary leaves: the backup is the slot's primary in that view
  // change, and the worker's next steps reach it.
  const uint64_t generation = c.scheduler->CurrentView().generation();
  c.server->Shutdown();
  TrainSteps(*c.ps, 5, 3);
  const v1::View after = c.scheduler->CurrentView();
  EXPECT_EQ(after.shard_map().slots(0).address(), (*backup)->address());
  EXPECT_EQ(after.shard_map().slots(0).backups_size(), 0);
  EXPECT_EQ(after.generation(), generation);
  v1::StatsResponse st;
  (*backup)->shard().FillStats(&st);
  for (const auto& [id, version] : st.chunk_versions()) EXPECT_EQ(version, 8u);
}

INSTANTIATE_TEST_SUITE_P(Payloads, Replicas, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "shm" : "messages";
                         });

}  // namespace
}  // namespace strata
