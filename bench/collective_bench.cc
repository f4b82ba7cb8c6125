// Collective bandwidth: all-reduce and reduce-scatter of --mib MiB of fp32
// among --ranks ranks, as threads of this process over Gloo's loopback TCP
// (the real transport; ranks share this machine's cores) or in-process.
// Prints the bus bandwidth (NCCL-tests' convention: the bytes each rank's
// link must carry per second, 2(P-1)/P x the buffer for all-reduce,
// (P-1)/P for reduce-scatter), the median of --repeats timed rounds.
//   collective_bench --backend gloo --ranks 2 --mib 64
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "collective/gloo_communicator.h"
#include "collective/inproc_communicator.h"
#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"

namespace strata {
namespace {

std::vector<std::unique_ptr<Communicator>> Group(const std::string& backend,
                                                 int ranks) {
  if (backend == "inproc") return *MakeInProcGroup(ranks);
  auto comms = MakeLocalGlooGroup(ranks);
  if (!comms.ok()) {
    std::fprintf(stderr, "%s\n", comms.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(comms);
}

// Seconds per operation: the median over `repeats` rounds of `iters`.
double Time(std::vector<std::unique_ptr<Communicator>>& comms, size_t n,
            int iters, int repeats, bool reduce_scatter) {
  const int ranks = int(comms.size());
  std::vector<std::vector<float>> data(ranks, std::vector<float>(n, 1.0f));
  std::vector<std::vector<float>> out(ranks, std::vector<float>(n / ranks + 1));
  std::vector<size_t> counts;
  for (int r = 0; r < ranks; ++r) {
    counts.push_back(n * (r + 1) / ranks - n * r / ranks);
  }
  std::vector<double> rounds;
  for (int rep = 0; rep < repeats + 1; ++rep) {  // the first warms up
    std::vector<std::thread> threads;
    const absl::Time start = absl::Now();
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        Communicator& c = *comms[r];
        for (int i = 0; i < iters; ++i) {
          absl::Status s =
              reduce_scatter
                  ? c.ReduceScatter(data[r], counts,
                                    absl::MakeSpan(out[r].data(), counts[r]),
                                    ReduceOp::kSum)
                  : c.AllReduce(absl::MakeSpan(data[r]), ReduceOp::kSum);
          if (!s.ok()) {
            std::fprintf(stderr, "%s\n", s.ToString().c_str());
            std::exit(1);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    if (rep > 0) rounds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2] / iters;
}

// The peer in the same run: Gloo's own ring all-reduce on its own
// contexts (same transport, same ranks), seconds per operation.
double TimeGlooNative(int ranks, size_t n, int iters, int repeats) {
  gloo::rendezvous::HashStore store;
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto device = gloo::transport::tcp::CreateDevice("127.0.0.1");
      contexts[r] = std::make_shared<gloo::rendezvous::Context>(r, ranks);
      contexts[r]->connectFullMesh(store, device);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::vector<float>> data(ranks, std::vector<float>(n, 1.0f));
  std::vector<double> rounds;
  for (int rep = 0; rep < repeats + 1; ++rep) {
    threads.clear();
    const absl::Time start = absl::Now();
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        for (int i = 0; i < iters; ++i) {
          gloo::AllreduceOptions opts(contexts[r]);
          opts.setOutput(data[r].data(), n);
          using Fn = void (*)(void*, const void*, const void*, size_t);
          opts.setReduceFunction(static_cast<Fn>(&gloo::sum<float>));
          opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
          gloo::allreduce(opts);
        }
      });
    }
    for (auto& t : threads) t.join();
    if (rep > 0) rounds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2] / iters;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  CLI::App app("Collective bus bandwidth");
  std::string backend = "gloo";
  int ranks = 2, iters = 5, repeats = 3;
  double mib = 64;
  app.add_option("--backend", backend)
      ->check(CLI::IsMember({"gloo", "inproc"}));
  app.add_option("--ranks", ranks)->check(CLI::Range(1, 64));
  app.add_option("--mib", mib)->check(CLI::PositiveNumber);
  app.add_option("--iters", iters)->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  auto comms = strata::Group(backend, ranks);
  const size_t n = size_t(mib * (1 << 20) / sizeof(float));
  const double bytes = double(n) * sizeof(float);
  const double p = ranks;
  const double ar = strata::Time(comms, n, iters, repeats, false);
  const double rs = strata::Time(comms, n, iters, repeats, true);
  std::printf("allreduce_busbw_GBps %s_ranks%d_%gMiB %.3f\n", backend.c_str(),
              ranks, mib, bytes * 2 * (p - 1) / p / ar / 1e9);
  std::printf("reducescatter_busbw_GBps %s_ranks%d_%gMiB %.3f\n",
              backend.c_str(), ranks, mib, bytes * (p - 1) / p / rs / 1e9);
  if (backend == "gloo" && ranks > 1) {
    const double native = strata::TimeGlooNative(ranks, n, iters, repeats);
    std::printf("gloo_native_allreduce_busbw_GBps ranks%d_%gMiB %.3f\n", ranks,
                mib, bytes * 2 * (p - 1) / p / native / 1e9);
    std::printf("allreduce_ratio_to_gloo_native ranks%d_%gMiB %.3f\n", ranks,
                mib, native / ar);
  }
  return 0;
}
