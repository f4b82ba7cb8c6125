// GptCuda's mixture-of-experts blocks (model/gpt_cuda_moe.cc) against the
// CPU Gpt's: the same routing, loss, aux loss, drops and every gradient
// (bf16 tolerances, testing/gpu_model_test_util.h), top-1 and top-2, with
// and without capacity drops, stored and recomputed; the pass waits for
// only the routed experts; resident training refuses MoE. Label gpu (and
// vgpu, on the virtual GPU); skips without a CUDA device.
//
// The routing must come out the same on both for the gradients to
// compare: the bf16 activations move the router's log-probabilities by up
// to about 1e-3, so a token whose two best experts are closer than that
// could choose differently. The weights' seeds here route with a margin
// of 4x that (checked), and the choices and slots are compared before any
// gradient.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda_ops.h"
#include "model/gpt.h"
#include "model/gpt_cuda.h"
#include "model/model.h"
#include "model/moe_router.h"
#include "testing/gpt_test_util.h"
#include "testing/gpu_model_test_util.h"
#include "testing/model_test_util.h"

namespace strata {
namespace {

using testing::ExpectGradClose;
using testing::kLossAtol;
using testing::kLossRtol;
using testing::RandomTokens;
using testing::ShareBf16Weights;

// Three blocks, the middle one MoE (moe_every 2: the blocks after it are
// shifted by its extra parameters), or every one (moe_every 1).
GptConfig MoeConfig(int top_k, float capacity, bool recompute,
                    int moe_every = 2) {
  GptConfig c;
  c.vocab = 64;
  c.context = 16;
  c.layers = 3;
  c.heads = 2;
  c.width = 32;
  c.experts = 4;
  c.top_k = top_k;
  c.moe_every = moe_every;
  c.capacity = capacity;
  c.aux_loss = 0.05f;
  c.recompute = recompute;
  return c;
}

// The CPU and GPU log-probabilities differ by up to about 1e-3 here.
constexpr double kMinGap = 0.004;

// The smallest gap over the tokens, in log-probability, between the
// top_k-th largest probability and the next: how far the routing is from
// a tie that could flip it.
double MinGap(const MoeRouting& r, const GptConfig& c) {
  const int E = c.experts, K = c.top_k;
  const int N = static_cast<int>(r.probs.size()) / E;
  double gap = 1e9;
  for (int t = 0; t < N; ++t) {
    std::vector<float> p(r.probs.begin() + t * E,
                         r.probs.begin() + (t + 1) * E);
    std::sort(p.begin(), p.end(), std::greater<float>());
    gap = std::min(gap, std::log(double{p[K - 1]}) - std::log(double{p[K]}));
    if (K == 2)
      gap = std::min(gap, std::log(double{p[0]}) - std::log(double{p[1]}));
  }
  return gap;
}

// Parameters: top_k, capacity factor, recompute, moe_every.
class GptCudaMoeTest
    : public ::testing::TestWithParam<std::tuple<int, float, bool, int>> {
 protected:
  void SetUp() override {
    if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    const auto [top_k, capacity, recompute, moe_every] = GetParam();
    const GptConfig c = MoeConfig(top_k, capacity, recompute, moe_every);
    auto cpu = Gpt::Create(c);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
    auto gpu = GptCuda::Create(c);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    // Seeds whose routing has no near tie (kMinGap): a few in 60 for
    // three MoE blocks of 48 tokens.
    ShareBf16Weights(*cpu_, *gpu_, /*seed=*/moe_every == 1 ? 54 : 11);
    tokens_ = RandomTokens(kB * kT, 64, 1);
    targets_ = RandomTokens(kB * kT, 64, 2);
  }

  static constexpr int kB = 3, kT = 16;
  std::unique_ptr<Gpt> cpu_;
  std::unique_ptr<GptCuda> gpu_;
  std::vector<int32_t> tokens_, targets_;
};

TEST_P(GptCudaMoeTest, RoutingLossAndGradientsMatchCpu) {
  auto want = cpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT);
  ASSERT_TRUE(got.ok()) << got.status();
  // The same choices and slots, and margins that make them so on any
  // GPU: between each token's last chosen expert and the next, at least
  // kMinGap in log-probability, 4x the bf16 forward's difference.
  double min_gap = 1e9;
  for (int l = 0; l < cpu_->config().layers; ++l) {
    const MoeRouting* c = cpu_->moe_routing(l);
    const MoeRouting* g = gpu_->moe_routing(l);
    ASSERT_EQ(c == nullptr, g == nullptr) << "layer " << l;
    if (c == nullptr) continue;
    EXPECT_EQ(g->expert, c->expert) << "layer " << l;
    EXPECT_EQ(g->slot, c->slot) << "layer " << l;
    min_gap = std::min(min_gap, MinGap(*c, cpu_->config()));
  }
  EXPECT_GE(min_gap, kMinGap) << "a near tie: pick a seed with a margin";
  const MoeStats cs = cpu_->moe_stats(), gs = gpu_->moe_stats();
  ASSERT_EQ(gs.load, cs.load) << "the GPU routed differently (a near tie?)";
  EXPECT_EQ(gs.dropped, cs.dropped);
  EXPECT_EQ(gs.assignments, cs.assignments);
  if (std::get<1>(GetParam()) < 1.5f) {
    EXPECT_GT(cs.dropped, 0) << "the case with drops drops nothing";
  } else {
    EXPECT_EQ(cs.dropped, 0);
  }
  EXPECT_NEAR(gs.aux_loss, cs.aux_loss, 1e-3 * cs.aux_loss);
  EXPECT_NEAR(*got, *want, kLossAtol + kLossRtol * std::abs(*want));
  for (size_t i = 0; i < cpu_->params().size(); ++i) {
    const int p = static_cast<int>(i);
    EXPECT_EQ(gpu_->ParamUnused(p), cpu_->ParamUnused(p))
        << cpu_->params()[i].spec.name;
    ExpectGradClose(gpu_->grad_data(p), cpu_->grad_data(p),
                    static_cast<int64_t>(cpu_->params()[i].spec.numel()),
                    cpu_->params()[i].spec.name);
  }
  // And the loss alone, through the same forward.
  auto want_eval = cpu_->Loss(tokens_.data(), targets_.data(), kB, kT);
  auto got_eval = gpu_->Loss(tokens_.data(), targets_.data(), kB, kT);
  ASSERT_TRUE(want_eval.ok() && got_eval.ok());
  EXPECT_NEAR(*got_eval, *want_eval,
              kLossAtol + kLossRtol * std::abs(*want_eval));
}

// A second pass with accumulate adds its gradients to the first's, the
// idle experts' (zero) included, as the CPU model's do (the same batch:
// its routing's margin is the first test's).
TEST_P(GptCudaMoeTest, AccumulateAddsToTheHostGradients) {
  for (Model* m :
       {static_cast<Model*>(cpu_.get()), static_cast<Model*>(gpu_.get())}) {
    ASSERT_TRUE(
        m->ForwardBackward(tokens_.data(), targets_.data(), kB, kT).ok());
    ASSERT_TRUE(m->ForwardBackward(tokens_.data(), targets_.data(), kB, kT,
                                   /*accumulate=*/true)
                    .ok());
  }
  for (size_t i = 0; i < cpu_->params().size(); ++i) {
    const int p = static_cast<int>(i);
    ExpectGradClose(gpu_->grad_data(p), cpu_->grad_data(p),
                    static_cast<int64_t>(cpu_->params()[i].spec.numel()),
                    cpu_->params()[i].spec.name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gating, GptCudaMoeTest,
    ::testing::Values(
        std::make_tuple(1, 4.0f, false, 2), std::make_tuple(2, 4.0f, false, 2),
        std::make_tuple(1, 1.0f, false, 2), std::make_tuple(2, 1.0f, false, 2),
        std::make_tuple(2, 4.0f, true, 2), std::make_tuple(2, 1.0f, true, 2),
        std::make_tuple(2, 1.0f, false, 1), std::make_tuple(1, 1.0f, true, 1)),
    [](const auto& info) {
      return "top" + std::to_string(std::get<0>(info.param)) +
             (std::get<1>(info.param) < 1.5f ? "_drops" : "") +
             (std::get<2>(info.param) ? "_recompute" : "") +
             (std::get<3>(info.param) == 1 ? "_every_block" : "");
    });

// Four tokens, top-1 over eight experts: some expert gets none, and the
// GPU model neither names, waits for nor uploads it.
TEST(GptCudaMoe, WaitsOnlyForTheRoutedExperts) {
  if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "stored");
    GptConfig c = MoeConfig(1, 1.25f, recompute);
    c.layers = 2;
    c.experts = 8;
    auto gpu = GptCuda::Create(c);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    (*gpu)->InitParams(3);
    const std::vector<int32_t> x = RandomTokens(4, 64, 3),
                               y = RandomTokens(4, 64, 4);
    testing::ExpectWaitsOnlyForTheRoutedExperts(**gpu, x.data(), y.data(), 1,
                                                4);
  }
}

TEST(GptCudaMoe, ResidentTrainingIsRefused) {
  if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = GptCuda::Create(MoeConfig(2, 1.25f, false));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  OptimizerParams opt;
  opt.kind = OptimizerParams::kAdamW;
  const absl::Status s = (*gpu)->StartResident(opt);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("mixture-of-experts"), std::string::npos) << s;
}

}  // namespace
}  // namespace strata
