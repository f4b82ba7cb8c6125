// A one-server cluster for tests of the parameter server and its client
// (test-only): a real scheduler, a real server on 127.0.0.1, and a worker's
// PsClient over real gRPC.
#ifndef STRATA_TESTING_SERVER_PS_CLUSTER_H_
#define STRATA_TESTING_SERVER_PS_CLUSTER_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "scheduler/scheduler.h"
#include "server/parameter_server.h"
#include "strata/v1/ps.grpc.pb.h"
#include "testing/temp_dir.h"

namespace strata::testing {

struct Cluster {
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<ParameterServer> server;
  std::unique_ptr<SchedulerClient> worker;
  std::unique_ptr<PsClient> ps;
};

inline std::unique_ptr<Scheduler> StartScheduler(
    const std::string& consistency = "bsp") {
  SchedulerOptions so;
  so.num_shards = 1;
  so.consistency = ParseConsistency(consistency).value();
  auto s = Scheduler::Start(so);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

inline absl::StatusOr<std::unique_ptr<ParameterServer>> StartServer(
    const Scheduler& s, const std::string& data_dir, uint64_t ram_budget = 0) {
  ServerOptions o;
  o.ram_budget = ram_budget;
  o.scheduler_address = s.address();
  o.data_dir = data_dir;
  o.max_wait = absl::Seconds(10);
  return ParameterServer::Start(o);
}

inline ModelSpec Model() {
  ModelSpec m;
  m.chunk_bytes = 4 * 100;
  m.tensors.push_back({"w", {250}, "adam"});
  m.tensors.push_back({"b", {3}, "adam"});
  v1::InitSpec normal;
  normal.set_kind(v1::InitSpec::NORMAL);
  normal.set_scale(0.1f);
  normal.set_seed(7);
  m.inits = {normal, v1::InitSpec()};
  v1::GroupSpec g;
  g.set_name("adam");
  g.mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAM);
  g.mutable_optimizer()->set_lr(0.01f);
  m.groups.push_back(g);
  return m;
}

inline void Connect(Cluster& c, PsClientOptions options = {}) {
  SchedulerClientOptions wo;
  wo.scheduler_address = c.scheduler->address();
  auto worker = SchedulerClient::Connect(wo);
  ASSERT_TRUE(worker.ok()) << worker.status();
  c.worker = std::move(*worker);
  auto ps = PsClient::Create(options, c.worker.get());
  ASSERT_TRUE(ps.ok());
  c.ps = std::move(*ps);
  ASSERT_TRUE(c.ps->RegisterModel(Model()).ok());
  // The server must see this worker before it accepts its pushes.
  ASSERT_TRUE(
      c.worker
          ->WaitForView([](const v1::View& v) { return v.workers_size() == 1; },
                        absl::Seconds(10))
          .ok());
}

// TrainSteps with the tensors in the caller's w[0, 250) and b[0, 3) (b
// zeros, pushed as they are).
inline void TrainStepsIn(PsClient& ps, int64_t first, int64_t steps, float* w,
                         const float* b) {
  for (int64_t t = first; t < first + steps; ++t) {
    absl::Status s = ps.PullTensor(0, w, t, t);
    ASSERT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < 250; ++i)
      w[i] = w[i] - 0.5f + 0.01f * i;  // some gradient
    s = ps.PushTensor(0, w, t, 4);
    ASSERT_TRUE(s.ok()) << s;
    s = ps.PushTensor(1, b, t, 4);
    ASSERT_TRUE(s.ok()) << s;
  }
}

inline void TrainSteps(PsClient& ps, int64_t first, int64_t steps) {
  std::vector<float> w(250), b(3);
  TrainStepsIn(ps, first, steps, w.data(), b.data());
}

// A scheduler, one server without a data directory, and a connected worker
// client with `options`.
inline void StartCluster(Cluster& c, PsClientOptions options = {}) {
  c.scheduler = StartScheduler();
  auto server = StartServer(*c.scheduler, "");
  ASSERT_TRUE(server.ok()) << server.status();
  c.server = std::move(*server);
  Connect(c, options);
}

// Final weights of a run and the server's count of payloads that went
// through shared memory.
struct RunResult {
  std::vector<float> w, b;
  uint64_t shm_payloads = 0;
  uint64_t shm_tensor_payloads = 0;  // of those, in the tensor region
};

// The weights after `steps` steps, pulled into w and b, and the server's
// count.
inline RunResult FinalWeights(Cluster& c, float* w, float* b,
                              int64_t steps = 5) {
  RunResult run;
  EXPECT_TRUE(c.ps->PullTensor(0, w, steps, steps).ok());
  EXPECT_TRUE(c.ps->PullTensor(1, b, steps, steps).ok());
  run.w.assign(w, w + 250);
  run.b.assign(b, b + 3);
  auto stats = c.ps->Stats();
  EXPECT_TRUE(stats.ok());
  if (stats.ok()) {
    run.shm_payloads = (*stats)[0].shm_payloads();
    run.shm_tensor_payloads = (*stats)[0].shm_tensor_payloads();
  }
  return run;
}

// 5 steps through a new cluster whose worker has `options`.
inline RunResult TrainRun(PsClientOptions options) {
  Cluster c;
  StartCluster(c, options);
  if (::testing::Test::HasFatalFailure()) return {};
  TrainSteps(*c.ps, 0, 5);
  std::vector<float> w(250), b(3);
  return FinalWeights(c, w.data(), b.data());
}

// A stub of `c`'s server, for requests made by hand.
inline std::unique_ptr<v1::ParameterServer::Stub> ServerStub(const Cluster& c) {
  return v1::ParameterServer::NewStub(grpc::CreateChannel(
      c.server->address(), grpc::InsecureChannelCredentials()));
}

// A second worker of `c`'s job, for requests made by hand (a member's new
// session would replace its old one, and the first worker's client keeps
// its own).
inline absl::StatusOr<std::unique_ptr<SchedulerClient>> SecondWorker(
    const Cluster& c) {
  SchedulerClientOptions wo;
  wo.scheduler_address = c.scheduler->address();
  return SchedulerClient::Connect(wo);
}

}  // namespace strata::testing

#endif  // STRATA_TESTING_SERVER_PS_CLUSTER_H_
