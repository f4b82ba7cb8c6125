// Push+pull throughput of one client against the servers of a running
// cluster (started by bench/pushpull.sh). Registers a model of --model_mib
// MiB in --chunk_mib MiB chunks, then per round pushes every chunk and pulls
// every chunk with all of them in flight. Prints `pushpull_GBps <x>`: bytes
// pushed plus bytes pulled per second, best of --repeats.
#include <cstdio>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "common/malloc_tuning.h"

int main(int argc, char** argv) {
  strata::TuneMallocForPayloads();
  CLI::App app("push/pull throughput benchmark");
  std::string scheduler = "127.0.0.1:7070";
  int model_mib = 256, chunk_mib = 4, rounds = 4, repeats = 3, in_flight = 8;
  app.add_option("--scheduler", scheduler);
  app.add_option("--model_mib", model_mib)->check(CLI::PositiveNumber);
  app.add_option("--chunk_mib", chunk_mib)->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds)->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats)->check(CLI::PositiveNumber);
  app.add_option("--in_flight", in_flight, "calls on the wire per server")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  strata::SchedulerClientOptions so;
  so.scheduler_address = scheduler;
  auto sched = strata::SchedulerClient::Connect(so);
  if (!sched.ok())
    return std::fprintf(stderr, "%s\n", sched.status().ToString().c_str()), 1;
  strata::PsClientOptions po;
  po.max_in_flight_per_server = in_flight;
  auto ps = strata::PsClient::Create(po, sched->get());
  if (!ps.ok()) return 1;
  strata::ModelSpec model;
  model.chunk_bytes = static_cast<uint64_t>(chunk_mib) << 20;
  const int64_t numel = (static_cast<int64_t>(model_mib) << 20) / 4;
  model.tensors.push_back({"bench", {numel}, "sgd"});
  model.inits.emplace_back();
  strata::v1::GroupSpec g;  // plain SGD: the cheapest real update
  g.set_name("sgd");
  g.mutable_optimizer()->set_kind(strata::v1::OptimizerConfig::SGD);
  g.mutable_optimizer()->set_lr(1e-6f);
  model.groups.push_back(g);
  if (auto s = (*ps)->RegisterModel(model); !s.ok()) {
    return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  }
  (void)(*sched)->WaitForView(
      [](const strata::v1::View& v) { return v.workers_size() >= 1; },
      absl::Seconds(10));
  std::vector<float> grad(numel, 1e-3f), weights(numel);
  int64_t step = 0;
  auto round = [&]() -> bool {
    std::vector<strata::OpHandle> ops =
        (*ps)->PushTensorAsync(0, grad.data(), step, 1);
    for (strata::OpHandle& op :
         (*ps)->PullTensorAsync(0, weights.data(), -1, 0))
      ops.push_back(op);
    bool ok = true;
    for (auto& op : ops) {
      if (auto s = op.Wait(); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        ok = false;
      }
    }
    step++;
    return ok;
  };
  if (!round()) return 1;  // warm-up: connections, server-side pages
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < rounds; ++i) {
      if (!round()) return 1;
    }
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    const double gbps = 2.0 * rounds * numel * 4 / secs / 1e9;
    std::fprintf(stderr, "repeat %d: %.3f GB/s\n", r, gbps);
    best = std::max(best, gbps);
  }
  std::printf("pushpull_GBps %.3f\n", best);
  return 0;
}
