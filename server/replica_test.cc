// Replicated slots over real gRPC on 127.0.0.1: a real scheduler with
// --replicas 2, a primary and a backup server, a worker's client. The
// backup holds what the primary acknowledged, bit for bit, and serves on
// when the primary leaves. Parameter: payloads through shared memory (the
// primary forwards a copy in a message) or in messages (forwarded as they
// came).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "scheduler/scheduler.h"
#include "server/parameter_server.h"
#include "server/shard.h"
#include "storage/chunk_tier.h"
#include "storage/fault_fs.h"
#include "strata/v1/ps.grpc.pb.h"
#include "testing/server/ps_cluster.h"

namespace strata {
namespace {

using ::strata::testing::Cluster;
using ::strata::testing::Connect;
using ::strata::testing::StartServer;
using ::strata::testing::TempDir;
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

std::unique_ptr<v1::ParameterServer::Stub> StubOf(ParameterServer& s) {
  return v1::ParameterServer::NewStub(
      grpc::CreateChannel(s.address(), grpc::InsecureChannelCredentials()));
}

// The forwards `s` counted, as its Stats RPC answers.
uint64_t Forwards(ParameterServer& s) {
  auto stub = StubOf(s);
  grpc::ClientContext ctx;
  v1::StatsResponse st;
  EXPECT_TRUE(stub->Stats(&ctx, v1::StatsRequest(), &st).ok());
  return st.replica_forwards();
}

// The id of one chunk `shard` holds.
uint64_t AChunk(Shard& shard) {
  v1::StatsResponse st;
  shard.FillStats(&st);
  return st.chunk_versions().empty() ? 0 : st.chunk_versions().begin()->first;
}

// Waits until `s`'s view shows slot 0 with `backups` backups and none
// joining (a server joining a served slot catches up first).
bool AwaitBackups(const Scheduler& s, int backups) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    const v1::ShardSlot slot = s.CurrentView().shard_map().slots(0);
    if (slot.backups_size() == backups && slot.joining_size() == 0) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ADD_FAILURE() << "no view with " << backups
                << " caught-up backup(s): " << s.CurrentView().DebugString();
  return false;
}

// Starts `c`'s replicated scheduler, its primary (c.server) and a backup,
// which it returns (nullptr, with the failure added, if one did not
// start); each server with its data directory and RAM budget.
std::unique_ptr<ParameterServer> StartPair(Cluster& c,
                                           const std::string& primary_dir = "",
                                           const std::string& backup_dir = "",
                                           uint64_t ram_budget = 0) {
  c.scheduler = StartReplicatedScheduler();
  auto primary = StartServer(*c.scheduler, primary_dir, ram_budget);
  auto backup = StartServer(*c.scheduler, backup_dir, ram_budget);
  if (!primary.ok() || !backup.ok()) {
    ADD_FAILURE() << primary.status() << " " << backup.status();
    return nullptr;
  }
  c.server = std::move(*primary);
  if (!AwaitBackups(*c.scheduler, 1)) return nullptr;
  return std::move(*backup);
}

class Replicas : public ::testing::TestWithParam<bool> {};

TEST_P(Replicas, BackupHoldsWhatThePrimaryAckedAndTakesOver) {
  Cluster c;
  std::unique_ptr<ParameterServer> backup = StartPair(c);
  ASSERT_NE(backup, nullptr);
  const v1::View view = c.scheduler->CurrentView();
  ASSERT_EQ(view.shard_map().slots(0).backups_size(), 1);
  EXPECT_EQ(view.shard_map().slots(0).address(), c.server->address());
  PsClientOptions options;
  options.shared_memory = GetParam();
  Connect(c, options);

  TrainSteps(*c.ps, 0, 5);
  ExpectSameState(c.server->shard(), backup->shard());
  EXPECT_GE(Forwards(*c.server), 5u * 4);  // at least 4 chunk pushes a step
  EXPECT_EQ(Forwards(*backup), 0u);        // a backup forwards nothing
  auto stats = c.ps->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  if (GetParam()) {
    EXPECT_GT((*stats)[0].shm_payloads(), 0u);
  }

  // A backup takes changes from its primary only: a worker's push, a
  // forward from another server and a forward to the primary are all sent
  // back (UNAVAILABLE: the worker's client retries at its view's primary).
  const uint64_t chunk = AChunk(c.server->shard());
  v1::PushRequest push;
  push.set_member_id(c.worker->member_id());
  push.set_epoch(c.scheduler->CurrentView().epoch());
  push.set_chunk_id(chunk);
  push.set_step(5);
  push.set_num_samples(4);
  {
    grpc::ClientContext ctx;
    v1::PushResponse r;
    EXPECT_EQ(StubOf(*backup)->Push(&ctx, push, &r).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
  push.set_forwarded_by(view.shard_map().slots(0).member_id() + 100);
  {
    grpc::ClientContext ctx;
    v1::PushResponse r;
    const grpc::Status refused = StubOf(*backup)->Push(&ctx, push, &r);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(refused.error_message().find("not slot 0's primary"),
              std::string::npos)
        << refused.error_message();
  }
  v1::CommitRequest commit;
  commit.set_member_id(c.worker->member_id());
  commit.set_step(5);
  commit.set_forwarded_by(view.shard_map().slots(0).backups(0).member_id());
  {
    grpc::ClientContext ctx;
    v1::CommitResponse r;
    const grpc::Status refused = StubOf(*c.server)->Commit(&ctx, commit, &r);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(refused.error_message().find("not slot 0's primary"),
              std::string::npos)
        << refused.error_message();
  }
  ExpectSameState(c.server->shard(), backup->shard());

  // The primary leaves: the backup is the slot's primary in that view
  // change, and the worker's next steps reach it.
  const uint64_t generation = c.scheduler->CurrentView().generation();
  c.server->Shutdown();
  TrainSteps(*c.ps, 5, 3);
  const v1::View after = c.scheduler->CurrentView();
  EXPECT_EQ(after.shard_map().slots(0).address(), backup->address());
  EXPECT_EQ(after.shard_map().slots(0).backups_size(), 0);
  EXPECT_EQ(after.generation(), generation);
  v1::StatsResponse st;
  backup->shard().FillStats(&st);
  for (const auto& [id, version] : st.chunk_versions()) EXPECT_EQ(version, 8u);
}

// A server that joins a slot while its worker trains (its backup died)
// catches up from the primary with no step lost: it holds the primary's
// state bit for bit, takes every later change as a backup, and serves on
// when the primary leaves.
TEST(ReplicaJoin, AServerJoiningWhileTrainingRunsCatchesUpAndTakesOver) {
  Cluster c;
  std::unique_ptr<ParameterServer> backup = StartPair(c);
  ASSERT_NE(backup, nullptr);
  Connect(c);
  TrainSteps(*c.ps, 0, 2);
  backup->Shutdown();
  ASSERT_TRUE(AwaitBackups(*c.scheduler, 0));
  // Training goes on while the new server joins, catches up and becomes
  // the backup.
  std::atomic<bool> joined{false};
  std::thread trainer([&] {
    int64_t step = 2;
    while (!joined.load() && step < 2000) TrainSteps(*c.ps, step++, 1);
    TrainSteps(*c.ps, step, 3);  // with the new backup
    step += 3;
    EXPECT_GT(step, 5);
  });
  auto late = StartServer(*c.scheduler, "");
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(AwaitBackups(*c.scheduler, 1));
  joined = true;
  trainer.join();
  ExpectSameState(c.server->shard(), (*late)->shard());
  EXPECT_EQ(
      c.scheduler->CurrentView().shard_map().slots(0).backups(0).address(),
      (*late)->address());

  // The primary leaves: the caught-up server serves on, nothing rolls back.
  v1::StatsResponse before;
  c.server->shard().FillStats(&before);
  c.server->Shutdown();
  const uint64_t version = before.chunk_versions().begin()->second;
  TrainSteps(*c.ps, static_cast<int64_t>(version), 2);
  const v1::View after = c.scheduler->CurrentView();
  EXPECT_EQ(after.shard_map().slots(0).address(), (*late)->address());
  EXPECT_EQ(after.generation(), 0u);
  v1::StatsResponse st;
  (*late)->shard().FillStats(&st);
  for (const auto& [id, v] : st.chunk_versions()) EXPECT_EQ(v, version + 2);
}

// A joining server that stops reading the primary's state (it keeps its
// lease): it reads the header, then waits until its stream is cancelled.
class StalledJoiner : public v1::ParameterServer::Service {
 public:
  grpc::Status InstallState(grpc::ServerContext* ctx,
                            grpc::ServerReader<v1::ShardStatePart>* reader,
                            v1::InstallStateResponse*) override {
    v1::ShardStatePart part;
    if (reader->Read(&part)) header_read_.Notify();
    while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(10));
    return grpc::Status(grpc::StatusCode::CANCELLED, "stalled");
  }
  absl::Notification header_read_;
};

// A primary (its backup gone) in the middle of catching a StalledJoiner
// up: its pause holds, its writes waiting on the stream's windows.
class StalledCatchUp : public ::testing::Test {
 protected:
  void SetUp() override {
    std::unique_ptr<ParameterServer> backup = StartPair(c_);
    ASSERT_NE(backup, nullptr);
    // The model with a 16 MiB tensor (48 MiB of state with Adam's
    // moments): more than the stream's windows hold.
    ModelSpec model = testing::Model();
    model.chunk_bytes = 4 << 20;
    model.tensors.push_back({"big", {4 << 20}, "adam"});
    model.inits.push_back(v1::InitSpec());
    SchedulerClientOptions wo;
    wo.scheduler_address = c_.scheduler->address();
    c_.worker = SchedulerClient::Connect(wo).value();
    c_.ps = PsClient::Create({}, c_.worker.get()).value();
    ASSERT_TRUE(c_.ps->RegisterModel(model).ok());
    ASSERT_TRUE(c_.worker
                    ->WaitForView(
                        [](const v1::View& v) { return v.workers_size() == 1; },
                        absl::Seconds(10))
                    .ok());
    TrainSteps(*c_.ps, 0, 1);
    backup->Shutdown();
    ASSERT_TRUE(AwaitBackups(*c_.scheduler, 0));

    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&stalled_);
    fake_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    SchedulerClientOptions jo;
    jo.scheduler_address = c_.scheduler->address();
    jo.role = v1::ROLE_SERVER;
    jo.shard = 0;
    jo.address = absl::StrCat("127.0.0.1:", port);
    joiner_ = SchedulerClient::Connect(jo).value();
    ASSERT_EQ(c_.scheduler->CurrentView().shard_map().slots(0).joining_size(),
              1);
    catch_up_ = std::thread([this, address = jo.address] {
      v1::CatchUpRequest req;
      req.set_member_id(joiner_->member_id());
      req.set_address(address);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
      v1::CatchUpResponse resp;
      caught_ = StubOf(*c_.server)->CatchUp(&ctx, req, &resp);
    });
    ASSERT_TRUE(stalled_.header_read_.WaitForNotificationWithTimeout(
        absl::Seconds(30)));
  }
  void TearDown() override {
    if (catch_up_.joinable()) catch_up_.join();
    if (fake_) fake_->Shutdown();
  }

  Cluster c_;
  StalledJoiner stalled_;
  std::unique_ptr<grpc::Server> fake_;
  std::unique_ptr<SchedulerClient> joiner_;
  std::thread catch_up_;
  grpc::Status caught_;
};

// The joiner's leaving (the view drops it) cancels the state stream: the
// catch-up fails, and the worker's push waiting on the pause goes through.
// (Without the cancel this test hangs.)
TEST_F(StalledCatchUp, TheJoinerLeavingEndsThePause) {
  std::thread trainer([&] { TrainSteps(*c_.ps, 1, 1); });  // waits
  ASSERT_TRUE(joiner_->Leave().ok());
  catch_up_.join();
  trainer.join();
  EXPECT_FALSE(caught_.ok());
  EXPECT_EQ(c_.scheduler->CurrentView().shard_map().slots(0).joining_size(), 0);
  v1::StatsResponse st;
  c_.server->shard().FillStats(&st);
  int trained = 0;  // w's and b's chunks took both steps ("big" none)
  for (const auto& [id, version] : st.chunk_versions()) trained += version == 2;
  EXPECT_EQ(trained, 2);
}

// The primary stopping cancels it too: its shutdown does not wait for the
// stalled stream. (Without the cancel this test hangs.)
TEST_F(StalledCatchUp, ThePrimaryStoppingEndsThePause) {
  c_.server->Shutdown();
  catch_up_.join();
  EXPECT_FALSE(caught_.ok());
}

// A primary whose spill disk fails (EIO on every write below RocksDB,
// injected) stops when a flush meets it: the backup, which holds every update
// it acknowledged, serves on and the worker's next steps reach it, with no
// rollback.
TEST(ReplicaDisk, APrimaryWhoseSpillDiskFailsStopsAndTheBackupServesOn) {
  FaultInjection& faults = FaultInjection::Install();  // before RocksDB opens
  faults.Clear();
  Cluster c;
  const std::string primary_dir = TempDir("disk_primary");
  // w's tiles are 100 floats with Adam's moments (1200 bytes): a budget of
  // one tile spills at every step.
  std::unique_ptr<ParameterServer> backup =
      StartPair(c, primary_dir, TempDir("disk_backup"), 1200);
  ASSERT_NE(backup, nullptr);
  Connect(c);
  TrainSteps(*c.ps, 0, 2);
  ASSERT_TRUE(c.server->fatal().ok());
  faults.Add(FaultRule{primary_dir + "/spill/", "", FaultOp::kWrite, EIO});
  // The spill database's memtables (2 MiB at least) hold a thousand and
  // more of these tiles: the disk is met at their first flush.
  int64_t step = 2;
  while (c.server->fatal().ok() && step < 4000) {
    TrainSteps(*c.ps, step, 50);
    step += 50;
  }
  TrainSteps(*c.ps, step, 2);  // at the backup
  step += 2;
  faults.Clear();
  EXPECT_TRUE(absl::IsUnavailable(c.server->fatal())) << c.server->fatal();
  EXPECT_NE(c.server->fatal().message().find("spill disk failed"),
            std::string::npos)
      << c.server->fatal();
  const v1::View view = c.scheduler->CurrentView();
  EXPECT_EQ(view.shard_map().slots(0).address(), backup->address());
  EXPECT_EQ(view.generation(), 0u);
  v1::StatsResponse st;
  backup->shard().FillStats(&st);
  for (const auto& [id, version] : st.chunk_versions()) {
    EXPECT_EQ(version, static_cast<uint64_t>(step));
  }
}

INSTANTIATE_TEST_SUITE_P(Payloads, Replicas, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "shm" : "messages";
                         });

}  // namespace
}  // namespace strata
