// The bulk plane's transport alone (transport/ucx_node.h): two UCX workers
// in this process, held to TCP (as between hosts), one sending --mib MiB
// payloads to the other with --in_flight of them under way at a time, each
// received into a buffer posted for its tag, as a push's payload is.
// Prints `ucx_GBps <x>`: payload bytes per second, best of --repeats.
// bench/ucx.sh runs it against iperf3 on loopback.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "transport/ucx_node.h"

int main(int argc, char** argv) {
  CLI::App app("UCX tagged-send throughput");
  int mib = 4, in_flight = 4, repeats = 3;
  int64_t total_mib = 4096;
  app.add_option("--mib", mib, "payload size")->check(CLI::PositiveNumber);
  app.add_option("--in_flight", in_flight)->check(CLI::PositiveNumber);
  app.add_option("--total_mib", total_mib, "bytes moved per repeat")
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  strata::UcxNode::Options o;
  o.transports = "tcp";
  auto a = strata::UcxNode::Create(o);
  auto b = strata::UcxNode::Create(o);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "UCX: %s\n",
                 (a.ok() ? b : a).status().ToString().c_str());
    return 1;
  }
  auto ab = (*a)->Connect((*b)->address());
  if (!ab.ok())
    return std::fprintf(stderr, "%s\n", ab.status().ToString().c_str()), 1;
  const size_t n = static_cast<size_t>(mib) << 20;
  std::vector<std::vector<char>> out(in_flight, std::vector<char>(n, 1));
  std::vector<std::vector<char>> in(in_flight, std::vector<char>(n));
  const int64_t rounds = std::max<int64_t>(1, total_mib / mib / in_flight);
  uint64_t tag = 0;
  double best = 0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first warms up
    const absl::Time t0 = absl::Now();
    std::vector<std::unique_ptr<strata::UcxTransfer>> sends(in_flight),
        recvs(in_flight);
    for (int64_t i = 0; i < rounds; ++i, tag += in_flight) {
      for (int k = 0; k < in_flight; ++k) {
        sends[k] = (*ab)->Send(out[k].data(), n, tag + k);
        recvs[k] = (*b)->Receive(in[k].data(), n, tag + k);
      }
      for (int k = 0; k < in_flight; ++k) {
        if (!recvs[k]->Wait(absl::InfiniteFuture()).ok() ||
            !sends[k]->Wait(absl::InfiniteFuture()).ok()) {
          return std::fprintf(stderr, "a transfer failed\n"), 1;
        }
      }
    }
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    const double gbps =
        static_cast<double>(rounds) * in_flight * n / secs / 1e9;
    if (r > 0) best = std::max(best, gbps);
  }
  std::printf("ucx_GBps %.3f\n", best);
  return 0;
}
