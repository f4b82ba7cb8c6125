// The bulk data plane (PsClientOptions::wire, server/bulk_sessions.h)
// against a real server over real gRPC and UCX held to its TCP transport
// (the path between hosts): the same weights as plain messages, payloads
// counted on the plane, a session lost mid-run attached again with nothing
// applied twice, and requests naming payloads that are not theirs refused.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>
#include <vector>

#include "client/ps_client.h"
#include "common/status.h"
#include "security/certs.h"
#include "testing/server/ps_cluster.h"
#include "transport/bulk_cipher.h"
#include "transport/ucx_node.h"

namespace strata {
namespace {

using ::strata::testing::Cluster;
using ::strata::testing::FinalWeights;
using ::strata::testing::RunResult;
using ::strata::testing::ServerStub;
using ::strata::testing::StartCluster;
using ::strata::testing::TrainRun;
using ::strata::testing::TrainSteps;

class BulkPlane : public ::testing::Test {
 protected:
  // Both ends' UCX on TCP, as between hosts (on one host UCX would pick
  // shared memory).
  void SetUp() override { setenv("UCX_TLS", "tcp", 1); }

  static PsClientOptions Messages() {
    PsClientOptions o;
    o.shared_memory = false;
    return o;
  }
  static PsClientOptions Bulk(WireKind wire = WireKind::kUcx) {
    PsClientOptions o = Messages();
    o.wire = wire;
    o.bulk_min_bytes = 1;  // the test model's chunks are 400 bytes
    return o;
  }
  // A UCX worker of the test's own, on TCP.
  static std::shared_ptr<UcxNode> TestNode() {
    UcxNode::Options ucx;
    ucx.transports = "tcp";
    auto node = UcxNode::Create(ucx);
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? *node : nullptr;
  }
  // A session attached by hand through `stub` for `c`'s worker, from
  // `node` (it replaces the worker's own).
  static absl::StatusOr<v1::AttachBulkResponse> AttachByHand(
      v1::ParameterServer::Stub& stub, const Cluster& c, const UcxNode& node) {
    v1::AttachBulkRequest req;
    req.set_member_id(c.worker->member_id());
    req.set_epoch(c.worker->view().epoch());
    req.set_address(node.address());
    v1::AttachBulkResponse resp;
    grpc::ClientContext ctx;
    STRATA_RETURN_IF_ERROR(FromGrpcStatus(stub.AttachBulk(&ctx, req, &resp)));
    return resp;
  }
  // A push by `member` of chunk 0 naming a payload on the plane.
  static v1::PushRequest BulkPush(const Cluster& c, uint64_t member,
                                  uint32_t session, uint64_t tag,
                                  uint64_t size) {
    v1::PushRequest req;
    req.set_member_id(member);
    req.set_epoch(c.worker->view().epoch());
    req.set_chunk_id(c.ps->plan().chunks[0].id);
    req.set_num_samples(1);
    req.mutable_bulk()->set_session(session);
    req.mutable_bulk()->set_tag(tag);
    req.mutable_bulk()->set_size(size);
    return req;
  }
  static uint64_t BulkPayloads(Cluster& c) {
    auto stats = c.ps->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? (*stats)[0].bulk_payloads() : 0;
  }
};

TEST_F(BulkPlane, TrainsToTheSameWeightsAsPlainMessages) {
  for (const v1::DType dtype : {v1::DTYPE_F32, v1::DTYPE_BF16}) {
    SCOPED_TRACE(dtype == v1::DTYPE_F32 ? "fp32" : "bf16");
    PsClientOptions plain = Messages();
    plain.push_dtype = plain.pull_dtype = dtype;
    const RunResult messages = TrainRun(plain);
    ASSERT_EQ(messages.w.size(), 250u);
    PsClientOptions bulk = Bulk();
    bulk.push_dtype = bulk.pull_dtype = dtype;
    Cluster c;
    StartCluster(c, bulk);
    if (HasFatalFailure()) return;
    TrainSteps(*c.ps, 0, 5);
    std::vector<float> w(250), b(3);
    const RunResult on_plane = FinalWeights(c, w.data(), b.data());
    EXPECT_EQ(on_plane.w, messages.w);  // bit-identical
    EXPECT_EQ(on_plane.b, messages.b);
    // 5 steps of 4 chunk pushes and 3 pulls, and the final 4 pulls.
    EXPECT_EQ(BulkPayloads(c), 5u * 7 + 4);
    EXPECT_EQ(on_plane.shm_payloads, 0u);
    // What `strata status` shows of this worker: its one slot on the plane.
    const v1::WirePaths paths = c.ps->WirePaths();
    EXPECT_EQ(paths.bulk(), 1u);
    EXPECT_EQ(paths.region() + paths.shm() + paths.grpc(), 0u);
  }
}

TEST_F(BulkPlane, SmallPayloadsStayInMessages) {
  PsClientOptions options = Bulk();
  options.bulk_min_bytes = 401;  // above every chunk's 400 bytes
  Cluster c;
  StartCluster(c, options);
  if (HasFatalFailure()) return;
  TrainSteps(*c.ps, 0, 2);
  EXPECT_EQ(BulkPayloads(c), 0u);
  EXPECT_EQ(c.ps->WirePaths().grpc(), 1u);  // linked, but no chunk goes
}

TEST_F(BulkPlane, WireUcxFailsWhereTheServerOffersNoneAndAutoFallsBack) {
  for (const WireKind wire : {WireKind::kUcx, WireKind::kAuto}) {
    SCOPED_TRACE(WireKindName(wire));
    Cluster c;
    c.scheduler = ::strata::testing::StartScheduler();
    ServerOptions so;
    so.scheduler_address = c.scheduler->address();
    so.wire = WireKind::kGrpc;
    auto server = ParameterServer::Start(so);
    ASSERT_TRUE(server.ok()) << server.status();
    c.server = std::move(*server);
    SchedulerClientOptions wo;
    wo.scheduler_address = c.scheduler->address();
    auto worker = SchedulerClient::Connect(wo);
    ASSERT_TRUE(worker.ok());
    c.worker = std::move(*worker);
    auto ps = PsClient::Create(Bulk(wire), c.worker.get());
    ASSERT_TRUE(ps.ok());
    c.ps = std::move(*ps);
    const absl::Status s = c.ps->RegisterModel(::strata::testing::Model());
    if (wire == WireKind::kUcx) {
      EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
      EXPECT_NE(s.message().find("--wire grpc"), absl::string_view::npos) << s;
      continue;
    }
    ASSERT_TRUE(s.ok()) << s;
    TrainSteps(*c.ps, 0, 2);
    EXPECT_EQ(BulkPayloads(c), 0u);
    const v1::WirePaths paths = c.ps->WirePaths();
    EXPECT_EQ(paths.grpc(), 1u);
    EXPECT_EQ(paths.region() + paths.shm() + paths.bulk(), 0u);
  }
}

// Under mutual TLS the server gives each session a key and every payload
// is sealed: the same weights as plaintext messages; a worker with
// --bulk_insecure against a server without it still gets the key and
// seals; a server with --bulk_insecure gives none, and a worker without it
// refuses that plane (--wire ucx fails, naming why).
TEST_F(BulkPlane, UnderTlsPayloadsAreSealed) {
  const RunResult messages = TrainRun(Messages());
  ASSERT_EQ(messages.w.size(), 250u);
  const std::string dir = ::strata::testing::FreshDir("bulk_tls");
  ClusterCertsOptions certs;
  certs.out_dir = dir;
  ASSERT_TRUE(WriteClusterCerts(certs).ok());
  auto load = [&](const std::string& role) {
    auto s = Security::Load({dir + "/" + role + ".pem",
                             dir + "/" + role + ".key", dir + "/ca.pem"});
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  };
  for (const bool server_insecure : {false, true}) {
    SCOPED_TRACE(server_insecure ? "server --bulk_insecure" : "sealed");
    Cluster c;
    SchedulerOptions so;
    so.num_shards = 1;
    so.consistency = ParseConsistency("bsp").value();
    so.security = load("scheduler");
    auto scheduler = Scheduler::Start(so);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    c.scheduler = std::move(*scheduler);
    ServerOptions sv;
    sv.scheduler_address = c.scheduler->address();
    sv.security = load("server");
    sv.bulk_insecure = server_insecure;
    auto server = ParameterServer::Start(sv);
    ASSERT_TRUE(server.ok()) << server.status();
    c.server = std::move(*server);
    SchedulerClientOptions wo;
    wo.scheduler_address = c.scheduler->address();
    wo.security = load("worker");
    auto worker = SchedulerClient::Connect(wo);
    ASSERT_TRUE(worker.ok()) << worker.status();
    c.worker = std::move(*worker);
    PsClientOptions po = Bulk();
    po.security = load("worker");
    auto ps = PsClient::Create(po, c.worker.get());
    ASSERT_TRUE(ps.ok());
    c.ps = std::move(*ps);
    const absl::Status s = c.ps->RegisterModel(::strata::testing::Model());
    if (server_insecure) {
      EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
      EXPECT_NE(s.message().find("does not encrypt"), absl::string_view::npos)
          << s;
      continue;
    }
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(c.worker
                    ->WaitForView(
                        [](const v1::View& v) { return v.workers_size() == 1; },
                        absl::Seconds(10))
                    .ok());
    TrainSteps(*c.ps, 0, 5);
    std::vector<float> w(250), b(3);
    const RunResult sealed = FinalWeights(c, w.data(), b.data());
    EXPECT_EQ(sealed.w, messages.w);
    EXPECT_EQ(sealed.b, messages.b);
    EXPECT_EQ(BulkPayloads(c), 5u * 7 + 4);

    // A payload sealed under another key is refused, and nothing applied.
    grpc::ChannelArguments args;
    auto stub = v1::ParameterServer::NewStub(
        load("worker")->Dial(c.server->address(), Role::kServer, args));
    std::shared_ptr<UcxNode> node = TestNode();
    ASSERT_NE(node, nullptr);
    auto attached = AttachByHand(*stub, c, *node);
    ASSERT_TRUE(attached.ok()) << attached.status();
    const v1::AttachBulkResponse& session = *attached;
    EXPECT_EQ(session.key().size(), BulkCipher::kKeyBytes);
    auto endpoint = node->Connect(session.address());
    ASSERT_TRUE(endpoint.ok());
    const uint64_t tag = uint64_t{session.session()} << 32;
    std::vector<char> grad(400, 0), forged(400 + BulkCipher::kTagBytes);
    auto other = BulkCipher::FromKey(*BulkCipher::NewKey());
    ASSERT_TRUE(
        other->Seal(BulkCipher::kToServer, tag, grad.data(), 400, forged.data())
            .ok());
    auto send = (*endpoint)->Send(forged.data(), forged.size(), tag);
    auto applied = [&] {
      auto stats = c.ps->Stats();
      EXPECT_TRUE(stats.ok());
      return stats.ok() ? (*stats)[0].pushes_applied() : 0;
    };
    const uint64_t before = applied();
    v1::PushRequest push = BulkPush(c, c.worker->member_id(), session.session(),
                                    tag, forged.size());
    push.set_step(5);
    v1::PushResponse resp;
    grpc::ClientContext ctx;
    const absl::Status refused = FromGrpcStatus(stub->Push(&ctx, push, &resp));
    EXPECT_TRUE(absl::IsPermissionDenied(refused)) << refused;
    EXPECT_TRUE(send->Wait(absl::Now() + absl::Seconds(10)).ok());
    EXPECT_EQ(applied(), before);
  }
}

// A member's new session replaces its old one: the worker's link dies
// under it mid-run. The push or pull that named it is refused, retried in
// a message, and the client attaches again; the weights are those of plain
// messages, so no push applied twice.
TEST_F(BulkPlane, ALostSessionIsAttachedAgainWithNothingAppliedTwice) {
  const RunResult messages = TrainRun(Messages());
  ASSERT_EQ(messages.w.size(), 250u);
  Cluster c;
  StartCluster(c, Bulk());
  if (HasFatalFailure()) return;
  TrainSteps(*c.ps, 0, 2);
  const uint64_t before = BulkPayloads(c);
  EXPECT_EQ(before, 2u * 7);
  // Another session for the same member, from a UCX worker of the test's.
  std::shared_ptr<UcxNode> other = TestNode();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(AttachByHand(*ServerStub(c), c, *other).ok());
  TrainSteps(*c.ps, 2, 3);
  std::vector<float> w(250), b(3);
  const RunResult after = FinalWeights(c, w.data(), b.data());
  EXPECT_EQ(after.w, messages.w);
  EXPECT_EQ(after.b, messages.b);
  auto stats = c.ps->Stats();
  ASSERT_TRUE(stats.ok());
  // The worker's first session, the test's, and the worker's again after
  // a call that named the lost one was refused.
  EXPECT_EQ((*stats)[0].bulk_attaches(), 3u);
  // Back on the plane once attached again (the timer thread attaches
  // within a second): some of the last 3 steps' payloads went there.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (BulkPayloads(c) == before && absl::Now() < deadline) {
    ASSERT_TRUE(c.ps->PullTensor(0, w.data(), -1, 0).ok());
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_GT(BulkPayloads(c), before);
}

// Requests made by hand: a tag outside the caller's session and a session
// of another member are refused, before anything is applied.
TEST_F(BulkPlane, PayloadsOfAnotherSessionAreRefused) {
  Cluster c;
  StartCluster(c, Messages());
  if (HasFatalFailure()) return;
  std::shared_ptr<UcxNode> node = TestNode();
  ASSERT_NE(node, nullptr);
  auto attached = AttachByHand(*ServerStub(c), c, *node);
  ASSERT_TRUE(attached.ok()) << attached.status();
  const v1::AttachBulkResponse& session = *attached;
  auto push = [&](uint64_t member, uint64_t tag) {
    const v1::PushRequest req =
        BulkPush(c, member, session.session(), tag, 400);
    v1::PushResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return FromGrpcStatus(ServerStub(c)->Push(&ctx, req, &resp));
  };
  const uint64_t own = uint64_t{session.session()} << 32;
  const absl::Status foreign_tag =
      push(c.worker->member_id(), own ^ (1ull << 32));
  EXPECT_TRUE(absl::IsInvalidArgument(foreign_tag)) << foreign_tag;
  const absl::Status other_member = push(c.worker->member_id() + 1000, own);
  EXPECT_TRUE(absl::IsUnavailable(other_member)) << other_member;
  EXPECT_NE(other_member.message().find("no bulk session"),
            absl::string_view::npos);
  auto stats = c.ps->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].pushes_applied(), 0u);
  EXPECT_EQ((*stats)[0].bulk_payloads(), 0u);
}

// A push whose payload never comes (its sender closed the link, say)
// does not hold its handler for the 30 s a payload is waited for: the
// session's end (here: replaced by a new one) cancels the receive, and
// the push fails at once, well inside its 10 s deadline.
TEST_F(BulkPlane, ASessionsEndReleasesPushesWaitingForPayloads) {
  Cluster c;
  StartCluster(c, Messages());
  if (HasFatalFailure()) return;
  std::shared_ptr<UcxNode> node = TestNode();
  ASSERT_NE(node, nullptr);
  auto attached = AttachByHand(*ServerStub(c), c, *node);
  ASSERT_TRUE(attached.ok()) << attached.status();
  const uint32_t session = attached->session();
  absl::Status pushed;
  std::thread push([&] {
    // A payload never sent.
    const v1::PushRequest req = BulkPush(c, c.worker->member_id(), session,
                                         (uint64_t{session} << 32) | 5, 400);
    v1::PushResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    pushed = FromGrpcStatus(ServerStub(c)->Push(&ctx, req, &resp));
  });
  absl::SleepFor(absl::Milliseconds(300));  // the push waits for its payload
  ASSERT_TRUE(AttachByHand(*ServerStub(c), c, *node).ok());  // replaces it
  push.join();
  EXPECT_TRUE(absl::IsUnavailable(pushed)) << pushed;
  EXPECT_NE(pushed.message().find("no bulk session"), absl::string_view::npos)
      << pushed;
}

}  // namespace
}  // namespace strata
