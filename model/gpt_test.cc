// The GPT model: gradients against finite differences, recomputation,
// overfitting a short text, the grad-ready order, and argument checks.
#include "model/gpt.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/gpt_test_util.h"
#include "testing/model_test_util.h"

namespace strata {
namespace {

using testing::MakeGpt;
using testing::RandomTokens;
using testing::TinyConfig;

TEST(GptConfig, RejectsBadShapes) {
  GptConfig c;
  EXPECT_TRUE(c.Validate().ok());
  c.heads = 3;  // does not divide 64
  EXPECT_FALSE(c.Validate().ok());
  c = GptConfig();
  c.vocab = 70000;
  EXPECT_FALSE(c.Validate().ok());
  c = GptConfig();
  c.layers = 0;
  EXPECT_FALSE(Gpt::Create(c).ok());
}

TEST(Gpt, Gpt2SmallHas124MParameters) {
  GptConfig c;
  c.vocab = 50257;
  c.context = 1024;
  c.layers = 12;
  c.heads = 12;
  c.width = 768;
  auto gpt = Gpt::Create(c);
  ASSERT_TRUE(gpt.ok());
  EXPECT_EQ((*gpt)->num_params(), 124439808);  // GPT-2's published count
  EXPECT_EQ((*gpt)->params().size(), 2u + 12 * 12 + 2);
  EXPECT_EQ((*gpt)->params()[0].spec.name, "wte");
  EXPECT_EQ((*gpt)->params()[0].spec.group, "decay");
  EXPECT_EQ((*gpt)->params()[1].spec.group, "no_decay");
}

TEST(Gpt, InitParamsIsSeededAndFollowsParamInfo) {
  std::unique_ptr<Gpt> a = MakeGpt(TinyConfig(), 5);
  std::unique_ptr<Gpt> b = MakeGpt(TinyConfig(), 5);
  std::unique_ptr<Gpt> c = MakeGpt(TinyConfig(), 6);
  const int n = 32 * 16;  // wte
  double sum_sq = 0;
  for (int j = 0; j < n; ++j) {
    ASSERT_EQ(a->param_data(0)[j], b->param_data(0)[j]);
    sum_sq += a->param_data(0)[j] * a->param_data(0)[j];
  }
  EXPECT_NE(a->param_data(0)[0], c->param_data(0)[0]);
  EXPECT_NEAR(std::sqrt(sum_sq / n), 0.02, 0.003);
  EXPECT_EQ(a->param_data(2)[0], 1.0f);  // h.0.ln1.weight
  EXPECT_EQ(a->param_data(3)[0], 0.0f);  // h.0.ln1.bias
}

// The params are perturbed in float, so the loss is evaluated at a model
// whose activations are O(1): steps of 1e-2 keep rounding (~1e-7 of a loss
// of ~3.5) well under the differences, and truncation is O(eps^2).
TEST(Gpt, GradientsMatchFiniteDifferences) {
  GptConfig c = TinyConfig();
  std::unique_ptr<Gpt> gpt = MakeGpt(c);
  // Larger weights than the default init, so every path has a visible
  // gradient.
  for (size_t i = 0; i < gpt->params().size(); ++i) {
    const ParamInfo& p = gpt->params()[i];
    std::mt19937 rng(static_cast<uint32_t>(i));
    std::normal_distribution<float> d(0.0f, 0.3f);
    for (uint64_t j = 0; j < p.spec.numel(); ++j) {
      gpt->param_data(static_cast<int>(i))[j] += d(rng);
    }
  }
  const int B = 2, T = 11;
  std::vector<int32_t> tokens = RandomTokens(B * T, c.vocab, 1);
  std::vector<int32_t> targets = RandomTokens(B * T, c.vocab, 2);
  ASSERT_TRUE(gpt->ForwardBackward(tokens.data(), targets.data(), B, T).ok());
  const float eps = 1e-2f;
  int checked = 0;
  for (size_t i = 0; i < gpt->params().size(); ++i) {
    const int64_t n = static_cast<int64_t>(gpt->params()[i].spec.numel());
    float* w = gpt->param_data(static_cast<int>(i));
    for (int64_t j : {int64_t{0}, n / 2 + 1, n - 1}) {
      if (j >= n) continue;
      const float saved = w[j];
      w[j] = saved + eps;
      const double up = *gpt->Loss(tokens.data(), targets.data(), B, T);
      w[j] = saved - eps;
      const double down = *gpt->Loss(tokens.data(), targets.data(), B, T);
      w[j] = saved;
      const double numeric = (up - down) / (2 * eps);
      const double analytic = gpt->grad_data(static_cast<int>(i))[j];
      EXPECT_NEAR(analytic, numeric, 2e-3 + 3e-2 * std::abs(numeric))
          << gpt->params()[i].spec.name << "[" << j << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 70);
}

TEST(Gpt, RecomputeGivesIdenticalLossAndGradients) {
  GptConfig c = TinyConfig();
  std::unique_ptr<Gpt> plain = MakeGpt(c, 7);
  c.recompute = true;
  std::unique_ptr<Gpt> recompute = MakeGpt(c, 7);
  const int B = 3, T = 16;
  std::vector<int32_t> tokens = RandomTokens(B * T, c.vocab, 3);
  std::vector<int32_t> targets = RandomTokens(B * T, c.vocab, 4);
  auto a = plain->ForwardBackward(tokens.data(), targets.data(), B, T);
  auto b = recompute->ForwardBackward(tokens.data(), targets.data(), B, T);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  for (size_t i = 0; i < plain->params().size(); ++i) {
    const int n = static_cast<int>(plain->params()[i].spec.numel());
    for (int j = 0; j < n; ++j) {
      ASSERT_EQ(plain->grad_data(i)[j], recompute->grad_data(i)[j])
          << plain->params()[i].spec.name << "[" << j << "]";
    }
  }
}

TEST(Gpt, AccumulateAddsGradientsOfTwoCalls) {
  GptConfig c = TinyConfig();
  std::unique_ptr<Gpt> gpt = MakeGpt(c);
  const int B = 1, T = 8;
  std::vector<int32_t> tokens = RandomTokens(B * T, c.vocab, 5);
  std::vector<int32_t> targets = RandomTokens(B * T, c.vocab, 6);
  ASSERT_TRUE(gpt->ForwardBackward(tokens.data(), targets.data(), B, T).ok());
  std::vector<float> once(gpt->grad_data(2), gpt->grad_data(2) + 16);
  ASSERT_TRUE(
      gpt->ForwardBackward(tokens.data(), targets.data(), B, T, true).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_NEAR(gpt->grad_data(2)[j], 2 * once[j], 1e-6);
  }
}

TEST(Gpt, UseStorageMovesTheBuffers) {
  GptConfig c = TinyConfig();
  std::unique_ptr<Gpt> gpt = MakeGpt(c);
  const int B = 2, T = 8;
  std::vector<int32_t> tokens = RandomTokens(B * T, c.vocab, 5);
  std::vector<int32_t> targets = RandomTokens(B * T, c.vocab, 6);
  testing::ExpectUseStorageMovesTheBuffers(*gpt, tokens.data(), targets.data(),
                                           B, T);
}

TEST(Gpt, GradReadyReportsEveryParameterOnceLastLayersFirst) {
  std::unique_ptr<Gpt> gpt = MakeGpt(TinyConfig());
  std::vector<int> order;
  gpt->SetGradReadyCallback([&](int i) { order.push_back(i); });
  std::vector<int32_t> tokens = RandomTokens(8, 32, 1);
  ASSERT_TRUE(gpt->ForwardBackward(tokens.data(), tokens.data(), 1, 8).ok());
  const int n = static_cast<int>(gpt->params().size());
  ASSERT_EQ(static_cast<int>(order.size()), n);
  std::vector<int> seen(n, 0);
  for (int i : order) seen[i]++;
  for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << i;
  EXPECT_EQ(order.front(), n - 2);  // lnf.weight
  EXPECT_EQ(order.back(), 0);       // wte, tied to the LM head
}

// The trainer's pulls land while forward runs: each block waits for its
// own parameters only, with and without recomputation in backward.
TEST(Gpt, ReadsNoParameterBeforeItsWaitReturns) {
  for (bool recompute : {false, true}) {
    GptConfig config = TinyConfig();
    config.recompute = recompute;
    std::unique_ptr<Gpt> gpt = MakeGpt(config);
    const std::vector<int32_t> tokens = RandomTokens(16, 32, 1);
    const std::vector<int32_t> targets = RandomTokens(16, 32, 2);
    testing::ExpectWaitsBeforeEachParameterIsRead(*gpt, tokens.data(),
                                                  targets.data(), 2, 8);
  }
}

// A 2-layer model with Adam learns a 23-byte repeating text. Uniform
// guessing costs ln(256) = 5.55 nats; after the first sentence every byte is
// determined by the previous few, so the loss can approach 0. Below 0.5 (a
// probability of ~0.6 on the right byte on average) means it memorized the
// cycle, which a bigram-only model (no attention) could not do for bytes
// that occur twice with different successors ("e", " ", "o").
TEST(Gpt, OverfitsARepeatingText) {
  GptConfig c;
  c.context = 32;
  c.layers = 2;
  c.heads = 2;
  c.width = 32;
  std::unique_ptr<Gpt> gpt = MakeGpt(c, 3);
  const std::string text = "the quick brown fox on ";
  const int B = 4, T = 32;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      tokens[b * T + t] = text[(b * 5 + t) % text.size()];
      targets[b * T + t] = text[(b * 5 + t + 1) % text.size()];
    }
  }
  // Adam (beta1 0.9, beta2 0.99), lr 1e-2.
  std::vector<std::vector<float>> m, v;
  for (const ParamInfo& p : gpt->params()) {
    m.emplace_back(p.spec.numel(), 0.0f);
    v.emplace_back(p.spec.numel(), 0.0f);
  }
  float first = 0, loss = 0;
  for (int step = 1; step <= 150; ++step) {
    auto l = gpt->ForwardBackward(tokens.data(), targets.data(), B, T);
    ASSERT_TRUE(l.ok());
    loss = *l;
    if (step == 1) first = loss;
    const float c1 = 1 - std::pow(0.9f, step), c2 = 1 - std::pow(0.99f, step);
    for (size_t i = 0; i < gpt->params().size(); ++i) {
      float* w = gpt->param_data(i);
      const float* g = gpt->grad_data(i);
      for (size_t j = 0; j < m[i].size(); ++j) {
        m[i][j] = 0.9f * m[i][j] + 0.1f * g[j];
        v[i][j] = 0.99f * v[i][j] + 0.01f * g[j] * g[j];
        w[j] -= 1e-2f * (m[i][j] / c1) / (std::sqrt(v[i][j] / c2) + 1e-8f);
      }
    }
  }
  EXPECT_NEAR(first, std::log(256.0f), 0.3);
  EXPECT_LT(loss, 0.5f);
}

TEST(Gpt, RejectsBadBatches) {
  std::unique_ptr<Gpt> gpt = MakeGpt(TinyConfig());
  std::vector<int32_t> ok(32, 1), bad(32, 1);
  bad[5] = 32;
  EXPECT_FALSE(gpt->ForwardBackward(ok.data(), ok.data(), 1, 17).ok());
  EXPECT_FALSE(gpt->ForwardBackward(ok.data(), ok.data(), 0, 4).ok());
  EXPECT_FALSE(gpt->ForwardBackward(bad.data(), ok.data(), 2, 16).ok());
  EXPECT_FALSE(gpt->Loss(ok.data(), bad.data(), 2, 16).ok());
  EXPECT_FALSE(gpt->Generate({}, 3, 1.0f, 1).ok());
  EXPECT_FALSE(gpt->Generate({40}, 3, 1.0f, 1).ok());
}

TEST(Gpt, GenerateIsDeterministicAndSlidesPastContext) {
  std::unique_ptr<Gpt> gpt = MakeGpt(TinyConfig());
  auto a = gpt->Generate({1, 2, 3}, 20, 1.0f, 42);
  auto b = gpt->Generate({1, 2, 3}, 20, 1.0f, 42);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 23u);
  EXPECT_EQ(*a, *b);
  for (int32_t t : *a) EXPECT_TRUE(t >= 0 && t < 32);
  auto greedy = gpt->Generate({1, 2, 3}, 2, 0.0f, 1);
  ASSERT_TRUE(greedy.ok());
}

TEST(Gpt, FlopsPerTokenFollowsPalmFormula) {
  std::unique_ptr<Gpt> gpt = MakeGpt(TinyConfig());
  const double n = gpt->num_params() - 16.0 * 16;  // minus wpe
  EXPECT_DOUBLE_EQ(gpt->flops_per_token(), 6 * n + 12.0 * 2 * 16 * 16);
}

}  // namespace
}  // namespace strata
