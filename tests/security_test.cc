// Mutual TLS and role authorization on a real scheduler and parameter
// server (in this process, on 127.0.0.1): who may join, push, and act for
// whom, and what a certificate from another CA or a rotated CA gets.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <future>

#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "security/certs.h"
#include "security/tls.h"
#include "server/shard.h"
#include "strata/v1/scheduler.grpc.pb.h"
#include "testing/server/ps_cluster.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

class SecureCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(WriteClusterCerts({.out_dir = dir_ + "/a"}).ok());
    ASSERT_TRUE(WriteClusterCerts({.out_dir = dir_ + "/b"}).ok());
  }

  std::shared_ptr<const Security> Creds(const std::string& ca, Role role) {
    const std::string base =
        dir_ + "/" + ca + "/" + std::string(RoleName(role));
    auto s = Security::Load(
        {base + ".pem", base + ".key", dir_ + "/" + ca + "/ca.pem"});
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }

  void StartScheduler(const std::string& ca, const std::string& data_dir = "") {
    SchedulerOptions o;
    o.security = Creds(ca, Role::kScheduler);
    o.data_dir = data_dir;
    auto s = Scheduler::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
  }

  void StartServer(const std::string& ca) {
    ServerOptions o;
    o.scheduler_address = scheduler_->address();
    o.security = Creds(ca, Role::kServer);
    o.max_wait = absl::Seconds(10);
    auto s = ParameterServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }

  absl::StatusOr<std::unique_ptr<SchedulerClient>> Join(
      std::shared_ptr<const Security> security, v1::Role role) {
    SchedulerClientOptions o;
    o.scheduler_address = scheduler_->address();
    o.role = role;
    o.security = std::move(security);
    o.connect_timeout = absl::Seconds(3);
    return SchedulerClient::Connect(o);
  }

  std::unique_ptr<v1::Scheduler::Stub> SchedulerStub(const Security& s) {
    return v1::Scheduler::NewStub(
        s.Dial(scheduler_->address(), Role::kScheduler));
  }

  std::string dir_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ParameterServer> server_;
};

TEST_F(SecureCluster, MembersHoldingTheirRolesCertificatesTrain) {
  StartScheduler("a");
  StartServer("a");
  auto worker = Join(Creds("a", Role::kWorker), v1::ROLE_WORKER);
  ASSERT_TRUE(worker.ok()) << worker.status();
  PsClientOptions po;
  po.security = Creds("a", Role::kWorker);
  auto ps = PsClient::Create(po, worker->get());
  ASSERT_TRUE(ps.ok());
  ASSERT_TRUE((*ps)->RegisterModel(testing::Model()).ok());
  testing::TrainSteps(**ps, 0, 3);
  EXPECT_GE(server_->shard().num_chunks(), 1u);
}

TEST_F(SecureCluster, AClientCertificateMayReadButNotTrain) {
  StartScheduler("a");
  StartServer("a");
  auto tool = Join(Creds("a", Role::kClient), v1::ROLE_CLIENT);
  ASSERT_TRUE(tool.ok()) << tool.status();
  EXPECT_EQ((*tool)->view().servers_size(), 1);
  PsClientOptions po;
  po.security = Creds("a", Role::kClient);
  auto ps = PsClient::Create(po, tool->get());
  ASSERT_TRUE(ps.ok());
  absl::Status s = (*ps)->RegisterModel(testing::Model());
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("a client may not call RegisterChunks"));
  EXPECT_EQ(server_->shard().num_chunks(), 0u);
}

TEST_F(SecureCluster, AWorkerCannotActAsOrForAServer) {
  StartScheduler("a");
  StartServer("a");
  auto posing = Join(Creds("a", Role::kWorker), v1::ROLE_SERVER);
  EXPECT_TRUE(absl::IsPermissionDenied(posing.status())) << posing.status();
  EXPECT_THAT(posing.status().message(),
              HasSubstr("may not register as ROLE_SERVER"));

  auto worker = Creds("a", Role::kWorker);
  auto stub = SchedulerStub(*worker);
  const uint64_t server_id = scheduler_->CurrentView().servers(0).id();
  grpc::ClientContext leave_ctx;
  v1::LeaveRequest leave;
  leave.set_member_id(server_id);
  v1::LeaveResponse left;
  absl::Status s = FromGrpcStatus(stub->Leave(&leave_ctx, leave, &left));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(scheduler_->CurrentView().servers_size(), 1);  // still there

  grpc::ClientContext report_ctx;
  v1::ReportAppliedResponse reported;
  s = FromGrpcStatus(
      stub->ReportApplied(&report_ctx, v1::ReportAppliedRequest(), &reported));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("a worker may not call"));
}

TEST_F(SecureCluster, AMemberOfAnotherCaIsRefusedNamingTheAddress) {
  StartScheduler("a");
  auto stranger = Join(Creds("b", Role::kWorker), v1::ROLE_WORKER);
  EXPECT_FALSE(stranger.ok());
  EXPECT_THAT(stranger.status().message(), HasSubstr(scheduler_->address()));
  EXPECT_EQ(scheduler_->CurrentView().workers_size(), 0);
}

TEST_F(SecureCluster, APlaintextCallerIsRefused) {
  StartScheduler("a");
  auto stub = SchedulerStub(*Security::Plaintext());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
  v1::View view;
  absl::Status s =
      FromGrpcStatus(stub->GetView(&ctx, v1::GetViewRequest(), &view));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

// Bytes that are no request: the payload handlers (Push, Pull and their
// batches) answer
// INVALID_ARGUMENT; the others are refused by gRPC's own protobuf parsing
// (INTERNAL, before a handler runs). Either way the server goes on.
TEST_F(SecureCluster, RandomBytesAreRefusedAndTheServersGoOn) {
  StartScheduler("a");
  StartServer("a");
  auto worker = Creds("a", Role::kWorker);
  std::string junk(333, '\0');
  uint64_t x = 88172645463325252ull;
  for (char& c : junk) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift
    c = static_cast<char>(x);
  }
  junk[0] = '\xff';  // field 31, wire type 7: invalid at once
  auto call = [&junk](std::shared_ptr<grpc::Channel> channel,
                      const std::string& method) {
    grpc::GenericStub stub(channel);
    grpc::Slice slice(junk);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status s) { done.set_value(s); });
    return done.get_future().get();
  };
  auto ps = worker->Dial(server_->address(), Role::kServer);
  EXPECT_EQ(call(ps, "/strata.v1.ParameterServer/Push").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call(ps, "/strata.v1.ParameterServer/Pull").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call(ps, "/strata.v1.ParameterServer/PushBatch").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call(ps, "/strata.v1.ParameterServer/PullBatch").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  auto sched = worker->Dial(scheduler_->address(), Role::kScheduler);
  EXPECT_FALSE(call(sched, "/strata.v1.Scheduler/Register").ok());
  EXPECT_FALSE(call(sched, "/strata.v1.Scheduler/Heartbeat").ok());
  // Both still serve members.
  auto joined = Join(worker, v1::ROLE_WORKER);
  ASSERT_TRUE(joined.ok()) << joined.status();
  PsClientOptions po;
  po.security = worker;
  auto client = PsClient::Create(po, joined->get());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->RegisterModel(testing::Model()).ok());
  testing::TrainSteps(**client, 0, 2);
}

TEST_F(SecureCluster, ANewCaTakesEffectWhenTheSchedulerRestarts) {
  const std::string state = dir_ + "/scheduler";
  StartScheduler("a", state);
  ASSERT_TRUE(Join(Creds("a", Role::kWorker), v1::ROLE_WORKER).ok());
  scheduler_->Shutdown();
  scheduler_.reset();

  StartScheduler("b", state);  // rotated: every member gets new files
  auto old_member = Join(Creds("a", Role::kWorker), v1::ROLE_WORKER);
  EXPECT_FALSE(old_member.ok());
  auto rotated = Join(Creds("b", Role::kWorker), v1::ROLE_WORKER);
  EXPECT_TRUE(rotated.ok()) << rotated.status();
}

}  // namespace
}  // namespace strata
