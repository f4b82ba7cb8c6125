// A one-server cluster for tests of the parameter server and its client
// (test-only): a real scheduler, a real server on 127.0.0.1, and a worker's
// PsClient over real gRPC.
#ifndef STRATA_TESTING_SERVER_PS_CLUSTER_H_
#define STRATA_TESTING_SERVER_PS_CLUSTER_H_

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

namespace strata::testing {

inline std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/strata_ps_test_" +
                    name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

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
  so.consistency = consistency;
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
    ASSERT_TRUE(ps.PullTensor(0, w, t, t).ok());
    for (size_t i = 0; i < 250; ++i)
      w[i] = w[i] - 0.5f + 0.01f * i;  // some gradient
    ASSERT_TRUE(ps.PushTensor(0, w, t, 4).ok());
    ASSERT_TRUE(ps.PushTensor(1, b, t, 4).ok());
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

}  // namespace strata::testing

#endif  // STRATA_TESTING_SERVER_PS_CLUSTER_H_
