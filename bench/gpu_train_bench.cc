// Single-GPU training throughput of GptCuda with resident AdamW (weights,
// gradients and optimizer state on the device; no servers): forward,
// backward and update per step, as llm.c and PyTorch trainers are timed.
//
// Prints, per configuration and batch,
//   gpu_tokens_per_s <config> <tokens/s>
//   gpu_mfu <config> <model FLOPs per second / the device's bf16 peak>
// from the median step time after warm-up steps. Model FLOPs are
// Model::flops_per_token() (6 x parameters plus attention, no recompute
// counted). Without a CUDA device it says so and exits 0.
//
// With --profile, also the device time of each op class per timed step
// (CUDA events around each op: GptCuda::Options::profile), and its share:
//   gpu_profile <config> <op class> <ms per step> <share of the sum>
// The events add a little time, so compare tokens/s from runs without it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/cuda_ops.h"
#include "model/gpt_cuda.h"
#include "optim/optimizer.h"

namespace strata {
namespace {

struct Shape {
  std::string name;
  int layers, heads, width;
};

// GPT-2's sizes (small, medium, large, xl).
const Shape kShapes[] = {
    {"gpt2_124M", 12, 12, 768},
    {"gpt2_350M", 24, 16, 1024},
    {"gpt2_774M", 36, 20, 1280},
    {"gpt2_1558M", 48, 25, 1600},
};

int Run(const Shape& shape, int batch, int context, bool recompute, int warmup,
        int steps, bool profile) {
  GptConfig cfg{.vocab = 50257,
                .context = context,
                .layers = shape.layers,
                .heads = shape.heads,
                .width = shape.width,
                .recompute = recompute};
  const std::string name = shape.name + "_B" + std::to_string(batch) + "_T" +
                           std::to_string(context) + (recompute ? "_rc" : "");
  GptCuda::Options options;
  options.profile = profile;
  auto model_or = GptCuda::Create(cfg, options);
  if (!model_or.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(),
                 model_or.status().ToString().c_str());
    return 1;
  }
  GptCuda& model = **model_or;
  model.InitParams(1);
  OptimizerParams opt;  // AdamW, as llm.c: lr 3e-4 (6e-4 peak), wd 0.1
  opt.lr = 3e-4f;
  opt.weight_decay = 0.1f;
  if (absl::Status s = model.StartResident(opt); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), s.ToString().c_str());
    return 1;
  }
  const int B = batch, T = context;
  std::mt19937 rng(1);
  std::vector<int32_t> tokens(int64_t{B} * T + 1);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % cfg.vocab);
  std::vector<double> seconds;
  for (int step = 0; step < warmup + steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    // ResidentStep waits for the loss, so the step is complete on return.
    auto loss =
        model.ResidentStep(tokens.data(), tokens.data() + 1, B, T, step);
    if (!loss.ok()) {
      // Out of memory is an answer too: this batch does not fit.
      std::fprintf(stderr, "%s: %s\n", name.c_str(),
                   loss.status().ToString().c_str());
      return 1;
    }
    const std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    std::fprintf(stderr, "%s step %d loss %.4f %.1f ms\n", name.c_str(), step,
                 *loss, 1e3 * took.count());
    if (step >= warmup) seconds.push_back(took.count());
    if (step + 1 == warmup) model.TakeProfile();  // drop the warm-up steps
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const double tps = B * T / median;
  std::printf("gpu_tokens_per_s %s %.0f\n", name.c_str(), tps);
  if (model.peak_flops() > 0) {
    std::printf("gpu_mfu %s %.3f\n", name.c_str(),
                tps * model.flops_per_token() / model.peak_flops());
  }
  const auto ops = model.TakeProfile();
  double sum = 0;
  for (const auto& [op, ms] : ops) sum += ms;
  for (const auto& [op, ms] : ops) {
    std::printf("gpu_profile %s %s %.3f %.3f\n", name.c_str(), op.c_str(),
                ms / steps, ms / sum);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  CLI::App app("Single-GPU GPT training throughput (resident AdamW)");
  std::string only = "gpt2_124M", batches = "8,16,32";
  int context = 1024, warmup = 3, steps = 10;
  bool recompute = false, profile = false;
  app.add_option("--config", only,
                 "gpt2_124M | gpt2_350M | gpt2_774M | gpt2_1558M | all");
  app.add_option("--batch", batches, "comma-separated batch sizes");
  app.add_option("--context", context, "sequence length")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--warmup", warmup, "untimed steps first")
      ->check(CLI::Range(0, 1000));
  app.add_option("--steps", steps, "timed steps (median reported)")
      ->check(CLI::Range(1, 100000));
  app.add_flag("--recompute", recompute, "recompute block activations");
  app.add_flag("--profile", profile,
               "also print the device time per op class (gpu_profile lines)");
  CLI11_PARSE(app, argc, argv);
  std::vector<int> bs;
  for (absl::string_view b : absl::StrSplit(batches, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(b, &v) || v < 1) {
      std::fprintf(stderr, "--batch: bad size \"%.*s\"\n",
                   static_cast<int>(b.size()), b.data());
      return 2;
    }
    bs.push_back(v);
  }
  if (strata::kernels::cuda::DeviceCount() == 0) {
    std::fprintf(stderr, "no CUDA device: skipped\n");
    return 0;
  }
  int failures = 0, matched = 0;
  for (const strata::Shape& s : strata::kShapes) {
    if (only != "all" && s.name != only) continue;
    ++matched;
    for (int b : bs) {
      failures +=
          strata::Run(s, b, context, recompute, warmup, steps, profile) != 0;
    }
  }
  if (matched == 0) {
    std::fprintf(stderr, "--config: unknown \"%s\"\n", only.c_str());
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
