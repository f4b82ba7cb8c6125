// Push+pull throughput of --workers clients (threads of this process, each
// a worker with its own scheduler session and PsClient) against the servers
// of a running cluster (started by bench/pushpull.sh). Registers a model of
// --model_mib MiB in --chunk_mib MiB chunks, then per round every client
// pushes every chunk and pulls every chunk with all of them in flight.
// Prints `pushpull_GBps <x>`: bytes pushed plus bytes pulled by all clients
// per second, best of --repeats. --shm 0 keeps payloads in the gRPC
// messages even where the servers could map shared memory. With
// --tls_cert/--tls_key/--tls_ca (a worker's) every channel is mutual TLS.
// --bf16 1 pushes gradients and pulls weights as bf16 (a GPU worker's
// default): the figure still counts the model's fp32 bytes (what a worker
// synchronizes per second), and `pushpull_wire_GBps` the bytes sent.
// --chunk_kib N cuts the model into N KiB chunks instead, and prints
// `pushpull_us_per_op` too: the time of a round over its ops (a push or
// a pull of one chunk by one client), where the calls, not the bytes,
// set the pace; --batch_kib 0 gives each op its own call.
// --tensors 1 puts each client's gradient and weights in a shared-memory
// region the servers map (PsClient::ShareTensors), as a worker's model is:
// pushes are read and pulls written in place, with no copy through a slot
// on the client's side.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "common/malloc_tuning.h"
#include "common/shm_region.h"
#include "security/tls.h"

namespace {

struct Client {
  std::unique_ptr<strata::SchedulerClient> sched;
  std::unique_ptr<strata::PsClient> ps;
  std::vector<float> storage;                 // or
  std::shared_ptr<strata::ShmRegion> region;  // with --tensors
  float* grad = nullptr;
  float* weights = nullptr;
  int64_t step = 0;
  bool ok = true;

  // The gradient (1e-3 each) and weights, `numel` each, in `storage` or in
  // a region shared with the servers.
  absl::Status Place(int64_t numel, bool tensors) {
    const size_t bytes = static_cast<size_t>(numel) * 2 * sizeof(float);
    if (tensors) {
      auto r = strata::ShmRegion::Create(strata::ShmRegion::kHeaderBytes +
                                         (bytes + 4095) / 4096 * 4096);
      if (!r.ok()) return r.status();
      region = std::move(*r);
      grad = reinterpret_cast<float*>(region->data() +
                                      strata::ShmRegion::kHeaderBytes);
    } else {
      storage.resize(static_cast<size_t>(numel) * 2);
      grad = storage.data();
    }
    weights = grad + numel;
    std::fill(grad, grad + numel, 1e-3f);
    if (tensors) ps->ShareTensors(region);
    return absl::OkStatus();
  }

  // One round: push and pull the whole model.
  void Round() {
    std::vector<strata::OpHandle> ops = ps->PushTensorAsync(0, grad, step, 1);
    for (strata::OpHandle& op : ps->PullTensorAsync(0, weights, -1, 0))
      ops.push_back(op);
    for (auto& op : ops) {
      if (auto s = op.Wait(); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        ok = false;
      }
    }
    step++;
  }
};

}  // namespace

int main(int argc, char** argv) {
  strata::TuneMallocForPayloads();
  CLI::App app("push/pull throughput benchmark");
  std::string scheduler = "127.0.0.1:7070";
  int model_mib = 256, chunk_mib = 4, rounds = 4, repeats = 3, in_flight = 8;
  int workers = 1, chunk_kib = 0, batch_kib = 64;
  bool shm = true, bf16 = false, tensors = false;
  std::string wire = "grpc";
  app.add_option("--scheduler", scheduler);
  app.add_option("--wire", wire,
                 "grpc, or ucx: payloads the shared memory does not carry "
                 "on the bulk plane (UCX_TLS picks its transport)")
      ->check(CLI::IsMember({"grpc", "ucx"}));
  app.add_option("--model_mib", model_mib)->check(CLI::PositiveNumber);
  app.add_option("--chunk_mib", chunk_mib)->check(CLI::PositiveNumber);
  app.add_option("--chunk_kib", chunk_kib,
                 "chunks of this many KiB instead (many small ops: prints "
                 "pushpull_us_per_op)")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds)->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats)->check(CLI::PositiveNumber);
  app.add_option("--batch_kib", batch_kib,
                 "ops under this many KiB share calls when they queue "
                 "(PsClientOptions::batch_max_bytes); 0: one call each")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--in_flight", in_flight, "calls on the wire per server")
      ->check(CLI::PositiveNumber);
  app.add_option("--workers", workers, "clients pushing and pulling at once")
      ->check(CLI::PositiveNumber);
  app.add_option("--shm", shm, "payloads through shared memory where possible");
  app.add_option("--bf16", bf16, "push and pull as bf16");
  app.add_option("--tensors", tensors,
                 "gradient and weights in a region the servers map");
  strata::TlsFiles tls;
  app.add_option("--tls_cert", tls.cert);
  app.add_option("--tls_key", tls.key);
  app.add_option("--tls_ca", tls.ca);
  CLI11_PARSE(app, argc, argv);
  if (tensors && (bf16 || !shm)) {
    // bf16 payloads and messages never go in place.
    std::fprintf(stderr, "--tensors 1 needs --shm 1 and --bf16 0\n");
    return 2;
  }
  auto security = strata::Security::Load(tls);
  if (!security.ok()) {
    return std::fprintf(stderr, "%s\n", security.status().ToString().c_str()),
           1;
  }

  strata::ModelSpec model;
  model.chunk_bytes = chunk_kib > 0 ? static_cast<uint64_t>(chunk_kib) << 10
                                    : static_cast<uint64_t>(chunk_mib) << 20;
  const int64_t numel = (static_cast<int64_t>(model_mib) << 20) / 4;
  // One tensor per chunk size: a cluster serves several configurations.
  model.tensors.push_back(
      {"bench_" + std::to_string(model.chunk_bytes >> 10) + "KiB",
       {numel},
       "sgd"});
  model.inits.emplace_back();
  strata::v1::GroupSpec g;  // plain SGD: the cheapest real update
  g.set_name("sgd");
  g.mutable_optimizer()->set_kind(strata::v1::OptimizerConfig::SGD);
  g.mutable_optimizer()->set_lr(1e-6f);
  model.groups.push_back(g);

  std::vector<Client> clients(workers);
  for (Client& c : clients) {
    strata::SchedulerClientOptions so;
    so.scheduler_address = scheduler;
    so.security = *security;
    auto sched = strata::SchedulerClient::Connect(so);
    if (!sched.ok())
      return std::fprintf(stderr, "%s\n", sched.status().ToString().c_str()), 1;
    c.sched = std::move(*sched);
    strata::PsClientOptions po;
    po.max_in_flight_per_server = in_flight;
    po.batch_max_bytes = static_cast<uint64_t>(batch_kib) << 10;
    po.shared_memory = shm;
    po.wire = *strata::ParseWireKind(wire);
    po.security = *security;
    if (bf16) po.push_dtype = po.pull_dtype = strata::v1::DTYPE_BF16;
    auto ps = strata::PsClient::Create(po, c.sched.get());
    if (!ps.ok()) return 1;
    c.ps = std::move(*ps);
    if (auto s = c.ps->RegisterModel(model); !s.ok()) {
      return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
    }
    if (auto s = c.Place(numel, tensors); !s.ok()) {
      return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
    }
  }
  (void)clients[0].sched->WaitForView(
      [workers](const strata::v1::View& v) {
        return v.workers_size() >= workers;
      },
      absl::Seconds(10));
  // Warm-up: connections, shared-memory pages, server-side pages.
  for (Client& c : clients) {
    c.Round();
    if (!c.ok) return 1;
  }
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    absl::Barrier* start = new absl::Barrier(workers + 1);
    std::vector<std::thread> threads;
    for (Client& c : clients) {
      threads.emplace_back([&c, start, rounds] {
        if (start->Block()) delete start;
        for (int i = 0; i < rounds && c.ok; ++i) c.Round();
      });
    }
    if (start->Block()) delete start;
    const absl::Time t0 = absl::Now();
    for (auto& t : threads) t.join();
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    for (const Client& c : clients) {
      if (!c.ok) return 1;
    }
    const double gbps = 2.0 * workers * rounds * numel * 4 / secs / 1e9;
    std::fprintf(stderr, "repeat %d: %.3f GB/s\n", r, gbps);
    best = std::max(best, gbps);
  }
  uint64_t shm_payloads = 0, in_place = 0;
  if (auto stats = clients[0].ps->Stats(); stats.ok()) {
    for (const auto& s : *stats) {
      shm_payloads += s.shm_payloads();
      in_place += s.shm_tensor_payloads();
    }
  }
  std::fprintf(stderr,
               "payloads through shared memory: %llu (in place: %llu)\n",
               static_cast<unsigned long long>(shm_payloads),
               static_cast<unsigned long long>(in_place));
  if (tensors && in_place == 0) {
    // The figure would be the slots' or the messages' under this name.
    std::fprintf(stderr, "--tensors 1: no payload went in place\n");
    return 1;
  }
  std::printf("pushpull_GBps %.3f\n", best);
  std::printf("pushpull_wire_GBps %.3f\n", bf16 ? best / 2 : best);
  if (chunk_kib > 0) {
    // Each round is a push and a pull of every chunk by every client.
    const double ops_per_round =
        2.0 * workers *
        static_cast<double>(clients[0].ps->plan().chunks.size());
    const double secs_per_round = 2.0 * workers * numel * 4 / (best * 1e9);
    std::printf("pushpull_us_per_op %.2f\n",
                secs_per_round * 1e6 / ops_per_round);
  }
  return 0;
}
