// The worker's gradient norm (SumOfSquares, trainer/grad_accumulator.h),
// which clipping needs once per step over the whole gradient, by memory
// bandwidth: against a plain read of the same array on the same threads in
// the same run (the limit: the norm reads every byte once), and against the
// sum as one running double per thread, the way it was computed before
// (2026-11-25).
//
// Usage: grad_norm_bench [--params N] [--reps R]   (default: GPT-2 124M)
// Prints: read_GBps, grad_norm_GBps, grad_norm_ratio_to_read,
//         one_chain_GBps, grad_norm_speedup_over_one_chain.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/best_seconds.h"
#include "bench/read_pass.h"
#include "common/parallel.h"
#include "trainer/grad_accumulator.h"

namespace {

constexpr int64_t kGrain = 1 << 16;

double OneChain(const float* g, int64_t n) {
  std::vector<double> parts(strata::NumChunks(n, kGrain), 0.0);
  strata::ParallelFor(n, kGrain, [&](int chunk, int64_t begin, int64_t end) {
    double s = 0;
    for (int64_t k = begin; k < end; ++k) s += static_cast<double>(g[k]) * g[k];
    parts[chunk] = s;
  });
  double sum = 0;
  for (double p : parts) sum += p;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("gradient norm benchmark");
  int64_t params = 124439808;  // GPT-2 124M
  int reps = 5;
  app.add_option("--params", params)->check(CLI::PositiveNumber);
  app.add_option("--reps", reps)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<float> g(static_cast<size_t>(params));
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>(static_cast<int64_t>(i % 2001) - 1000) * 1e-6f;
  }
  const double bytes = 4.0 * static_cast<double>(params);
  const int64_t words = params / 2;
  const auto* w = reinterpret_cast<const uint64_t*>(g.data());

  volatile uint64_t sink_x = 0;
  const double read_s = strata::bench::BestSeconds(reps, [&] {
    std::vector<uint64_t> parts(strata::NumChunks(words, kGrain), 0);
    strata::ParallelFor(words, kGrain, [&](int c, int64_t b, int64_t e) {
      parts[c] = strata::bench::XorWords(w + b, e - b);
    });
    uint64_t x = 0;
    for (uint64_t p : parts) x ^= p;
    sink_x = x;
  });
  double norm = 0, chain = 0;
  const double norm_s = strata::bench::BestSeconds(
      reps, [&] { norm = strata::SumOfSquares(g.data(), params); });
  const double chain_s = strata::bench::BestSeconds(
      reps, [&] { chain = OneChain(g.data(), params); });
  (void)sink_x;

  const double read_gbps = bytes / read_s / 1e9;
  const double norm_gbps = bytes / norm_s / 1e9;
  const double chain_gbps = bytes / chain_s / 1e9;
  std::printf("params %lld threads %d\n", static_cast<long long>(params),
              strata::NumThreads());
  std::printf("read_GBps %.2f\n", read_gbps);
  std::printf("grad_norm_GBps %.2f   (%.1f ms)\n", norm_gbps, norm_s * 1e3);
  std::printf("grad_norm_ratio_to_read %.3f\n", norm_gbps / read_gbps);
  std::printf("one_chain_GBps %.2f   (%.1f ms)\n", chain_gbps, chain_s * 1e3);
  std::printf("grad_norm_speedup_over_one_chain %.2f\n", chain_s / norm_s);
  // The two sums add in different orders: equal to a few ulps.
  std::printf("relative_difference %.2e\n", (norm - chain) / chain);
  return 0;
}
