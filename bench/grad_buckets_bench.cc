// Gradient buckets (collective/grad_buckets.h): the all-reduce of a GPT's
// whole gradient, tensor by tensor in backward's order, among --ranks ranks
// over Gloo's loopback TCP (threads of this process), three ways in the
// same run: one all-reduce per tensor, buckets of --bucket_mib, and one
// all-reduce of a single buffer of the same bytes (the limit buckets
// approach). Prints seconds per whole-gradient all-reduce and
// `bucketed_ratio_to_one_buffer` and `bucketed_speedup_over_per_tensor`.
//   grad_buckets_bench --layers 12 --width 768 --heads 12 --vocab 50257
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "collective/gloo_communicator.h"
#include "collective/grad_buckets.h"
#include "gloo/rendezvous/hash_store.h"
#include "model/gpt.h"

namespace strata {
namespace {

std::vector<std::unique_ptr<Communicator>> GlooGroup(int ranks) {
  auto comms = MakeLocalGlooGroup(ranks);
  if (!comms.ok()) {
    std::fprintf(stderr, "%s\n", comms.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(comms);
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// Median seconds of `repeats` rounds (after one warm-up) of fn(rank) run on
// every rank at once.
template <typename Fn>
double Time(int ranks, int repeats, Fn fn) {
  std::vector<double> rounds;
  for (int rep = 0; rep <= repeats; ++rep) {
    std::vector<std::thread> threads;
    const absl::Time start = absl::Now();
    for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { fn(r); });
    for (auto& t : threads) t.join();
    if (rep > 0) rounds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  CLI::App app("Gradient buckets against per-tensor and one-buffer all-reduce");
  strata::GptConfig c;
  c.layers = 4;
  c.width = 256;
  c.heads = 4;
  c.context = 256;
  c.vocab = 50257;
  int ranks = 2, repeats = 3;
  double bucket_mib = 25;
  app.add_option("--layers", c.layers);
  app.add_option("--width", c.width);
  app.add_option("--heads", c.heads);
  app.add_option("--context", c.context);
  app.add_option("--vocab", c.vocab);
  app.add_option("--ranks", ranks)->check(CLI::Range(2, 16));
  app.add_option("--repeats", repeats)->check(CLI::PositiveNumber);
  app.add_option("--bucket_mib", bucket_mib)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  auto gpt = strata::Gpt::Create(c);
  if (!gpt.ok()) {
    std::fprintf(stderr, "%s\n", gpt.status().ToString().c_str());
    return 2;
  }
  std::vector<size_t> sizes;  // backward's order: last tensors first
  size_t total = 0;
  for (auto it = (*gpt)->params().rbegin(); it != (*gpt)->params().rend();
       ++it) {
    sizes.push_back(it->spec.numel());
    total += it->spec.numel();
  }
  auto comms = strata::GlooGroup(ranks);
  std::vector<std::vector<std::vector<float>>> grads(ranks);
  for (auto& g : grads) {
    for (size_t n : sizes) g.emplace_back(n, 1.0f);
  }
  std::vector<std::vector<float>> flat(ranks, std::vector<float>(total, 1.0f));
  const size_t bucket_bytes = size_t(bucket_mib * (1 << 20));

  auto buckets_of = [&](size_t bytes) {
    return [&, bytes](int r) {
      strata::GradBuckets b(comms[r].get(), bytes);
      for (auto& g : grads[r]) b.Add(g.data(), g.size());
      b.Flush();
      strata::Check(b.Wait());
    };
  };
  const double per_tensor = strata::Time(ranks, repeats, buckets_of(0));
  const double bucketed =
      strata::Time(ranks, repeats, buckets_of(bucket_bytes));
  const double one = strata::Time(ranks, repeats, [&](int r) {
    strata::Check(
        comms[r]->AllReduce(absl::MakeSpan(flat[r]), strata::ReduceOp::kSum));
  });
  const double mib = double(total) * 4 / (1 << 20);
  std::printf("# L%d C%d V%d: %zu tensors, %.1f MiB, %d ranks over Gloo TCP\n",
              c.layers, c.width, c.vocab, sizes.size(), mib, ranks);
  std::printf("per_tensor_s %.4f\n", per_tensor);
  std::printf("bucketed_s %.4f (buckets of %g MiB)\n", bucketed, bucket_mib);
  std::printf("one_buffer_s %.4f\n", one);
  std::printf("bucketed_speedup_over_per_tensor %.3f\n", per_tensor / bucketed);
  std::printf("bucketed_ratio_to_one_buffer %.3f\n", one / bucketed);
  return 0;
}
