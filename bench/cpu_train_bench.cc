// Pure-compute CPU training throughput: forward, backward and a local AdamW
// step of the GPT model on random tokens, no parameter server.
//
// Prints, per configuration, `cpu_tokens_per_s <config> <tokens/s>` from the
// median step time after warm-up steps (other processes share the machine;
// the median ignores a step they happened to slow down).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/parallel.h"
#include "model/gpt.h"
#include "optim/optimizer.h"

namespace strata {
namespace {

struct BenchConfig {
  std::string name;
  GptConfig model;
  int batch;
};

std::vector<BenchConfig> Configs() {
  GptConfig small{
      .vocab = 50257, .context = 256, .layers = 4, .heads = 4, .width = 256};
  GptConfig gpt2{
      .vocab = 50257, .context = 64, .layers = 12, .heads = 12, .width = 768};
  // bench/moe_train.sh's shapes, resident: what the MoE GPT's compute
  // costs against the dense one's, without the servers.
  GptConfig tiny{
      .vocab = 256, .context = 64, .layers = 4, .heads = 4, .width = 128};
  GptConfig tiny_moe = tiny;
  tiny_moe.experts = 8;
  tiny_moe.top_k = 2;
  tiny_moe.expert_hidden = 256;
  tiny_moe.moe_every = 1;
  return {{"L4_C256_H4_B8_T256", small, 8},
          {"L12_C768_H12_B4_T64", gpt2, 4},
          {"L4_C128_H4_B8_T64", tiny, 8},
          {"L4_C128_H4_B8_T64_E8_K2", tiny_moe, 8}};
}

// AdamW over every parameter, split across the kernel thread pool.
class LocalAdamW {
 public:
  explicit LocalAdamW(Gpt& gpt) : gpt_(gpt) {
    for (const ParamInfo& p : gpt.params()) {
      m_.emplace_back(p.spec.numel(), 0.0f);
      v_.emplace_back(p.spec.numel(), 0.0f);
    }
    params_.lr = 3e-4f;
    params_.weight_decay = 0.1f;
  }

  void Step() {
    ++t_;
    for (size_t i = 0; i < m_.size(); ++i) {
      float* w = gpt_.param_data(static_cast<int>(i));
      const float* g = gpt_.grad_data(static_cast<int>(i));
      ApplyUpdateParallel(params_, params_.lr, t_, w, m_[i].data(),
                          v_[i].data(), g, m_[i].size());
    }
  }

 private:
  Gpt& gpt_;
  OptimizerParams params_;
  int64_t t_ = 0;
  std::vector<std::vector<float>> m_, v_;
};

int Run(const BenchConfig& c, int warmup, int steps) {
  auto gpt_or = Gpt::Create(c.model);
  if (!gpt_or.ok()) {
    std::fprintf(stderr, "%s\n", gpt_or.status().ToString().c_str());
    return 1;
  }
  Gpt& gpt = **gpt_or;
  gpt.InitParams(1);
  LocalAdamW adamw(gpt);
  const int B = c.batch, T = c.model.context;
  std::mt19937 rng(1);
  std::vector<int32_t> tokens(B * T + 1);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % c.model.vocab);
  std::vector<double> seconds;
  for (int step = 0; step < warmup + steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    auto loss = gpt.ForwardBackward(tokens.data(), tokens.data() + 1, B, T);
    if (!loss.ok()) {
      std::fprintf(stderr, "%s\n", loss.status().ToString().c_str());
      return 1;
    }
    adamw.Step();
    const std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    std::fprintf(stderr, "%s step %d loss %.4f %.3f s\n", c.name.c_str(), step,
                 *loss, took.count());
    if (step >= warmup) seconds.push_back(took.count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  std::printf("cpu_tokens_per_s %s %.1f\n", c.name.c_str(), B * T / median);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  CLI::App app("CPU GPT training throughput");
  std::string only;
  int warmup = 1, steps = 5, threads = 0;
  app.add_option("--config", only, "run only this configuration");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--steps", steps, "timed steps (median reported)");
  app.add_option("--threads", threads, "kernel threads (0: all cores)");
  CLI11_PARSE(app, argc, argv);
  if (steps < 1) steps = 1;
  if (threads > 0) strata::SetNumThreads(threads);
  for (const strata::BenchConfig& c : strata::Configs()) {
    if (!only.empty() && c.name != only) continue;
    if (int rc = strata::Run(c, warmup, steps); rc != 0) return rc;
  }
  return 0;
}
