// The CPU GPT with mixture-of-experts blocks (GptConfig::experts): one
// expert is the dense block, only routed experts get gradients, recompute
// changes nothing, the model learns, and the settings are checked and kept
// in model.json. The layer's own math is checked against PyTorch in
// tests/moe_torch_test.cc.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "model/gpt.h"
#include "model/gpt_config_json.h"
#include "testing/gpt_test_util.h"
#include "testing/model_test_util.h"

namespace strata {
namespace {

using testing::MakeGpt;
using testing::RandomTokens;
using testing::TinyConfig;

int Index(const Gpt& gpt, const std::string& name) {
  for (size_t i = 0; i < gpt.params().size(); ++i) {
    if (gpt.params()[i].spec.name == name) return static_cast<int>(i);
  }
  ADD_FAILURE() << "no parameter " << name;
  return 0;
}

TEST(GptMoe, ParametersAreTheRouterAndEachExpertsOwnTensors) {
  GptConfig c = TinyConfig();
  c.experts = 3;
  c.moe_every = 2;  // block 1 only
  auto gpt = MakeGpt(c);
  EXPECT_EQ(gpt->params()[Index(*gpt, "h.1.moe.router.weight")].spec.shape,
            (std::vector<int64_t>{3, 16}));
  EXPECT_EQ(
      gpt->params()[Index(*gpt, "h.1.moe.experts.2.proj.weight")].spec.shape,
      (std::vector<int64_t>{16, 64}));
  Index(*gpt, "h.0.mlp.fc.weight");  // block 0 stays dense
  const int64_t dense = MakeGpt(TinyConfig())->num_params();
  // Two more experts' MLPs and a router.
  EXPECT_EQ(gpt->num_params(), dense + 2 * (8 * 16 * 16 + 5 * 16) + 3 * 16);
  // --expert_hidden: experts narrower than the dense MLP.
  GptConfig narrow = c;
  narrow.expert_hidden = 24;
  auto n = MakeGpt(narrow);
  EXPECT_EQ(n->params()[Index(*n, "h.1.moe.experts.0.fc.weight")].spec.shape,
            (std::vector<int64_t>{24, 16}));
  EXPECT_EQ(n->num_params(), dense - (8 * 16 * 16 + 5 * 16) +
                                 3 * (2 * 24 * 16 + 24 + 16) + 3 * 16);
  // The FLOPs count a token's top_k experts, not the idle ones.
  GptConfig k3 = c;
  k3.experts = 2;
  EXPECT_NEAR(gpt->flops_per_token(), MakeGpt(k3)->flops_per_token() + 6.0 * 16,
              1e-6);
}

// One expert with room for every token is the dense MLP: its gate is
// softmax over one logit, exactly 1, and the router gets no gradient.
TEST(GptMoe, OneExpertIsTheDenseBlock) {
  GptConfig m = TinyConfig();
  m.experts = 1;
  m.top_k = 1;
  m.moe_every = 1;
  m.capacity = 1.0f;  // ceil(1 * N / 1) = N slots
  auto dense = MakeGpt(TinyConfig(), 5);
  auto moe = MakeGpt(m, 6);
  for (size_t i = 0; i < dense->params().size(); ++i) {
    const std::string name = absl::StrReplaceAll(
        dense->params()[i].spec.name, {{".mlp.", ".moe.experts.0."}});
    const int j = Index(*moe, name);
    const int64_t n = static_cast<int64_t>(dense->params()[i].spec.numel());
    std::copy(dense->param_data(i), dense->param_data(i) + n,
              moe->param_data(j));
  }
  const int B = 2, T = 16;
  const std::vector<int32_t> x = RandomTokens(B * T, 32, 1),
                             y = RandomTokens(B * T, 32, 2);
  auto a = dense->ForwardBackward(x.data(), y.data(), B, T);
  auto b = moe->ForwardBackward(x.data(), y.data(), B, T);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(*a, *b, 1e-5);
  for (size_t i = 0; i < dense->params().size(); ++i) {
    const std::string name = absl::StrReplaceAll(
        dense->params()[i].spec.name, {{".mlp.", ".moe.experts.0."}});
    const int j = Index(*moe, name);
    const int64_t n = static_cast<int64_t>(dense->params()[i].spec.numel());
    float worst = 0;
    for (int64_t k = 0; k < n; ++k) {
      worst = std::max(worst,
                       std::abs(dense->grad_data(i)[k] - moe->grad_data(j)[k]));
    }
    EXPECT_LE(worst, 1e-5f) << name;
  }
  for (int l = 0; l < 2; ++l) {
    const int r = Index(*moe, "h." + std::to_string(l) + ".moe.router.weight");
    for (int k = 0; k < 16; ++k) EXPECT_EQ(moe->grad_data(r)[k], 0.0f);
  }
  const MoeStats s = moe->moe_stats();
  EXPECT_EQ(s.dropped, 0);
  EXPECT_EQ(s.assignments, 2 * B * T);
  // f = P = 1 for the one expert: the aux loss is alpha per layer.
  EXPECT_NEAR(s.aux_loss, 2 * m.aux_loss, 1e-6);
}

bool AllZero(const Gpt& gpt, int i) {
  Gpt& g = const_cast<Gpt&>(gpt);
  const int64_t n = static_cast<int64_t>(gpt.params()[i].spec.numel());
  for (int64_t k = 0; k < n; ++k) {
    if (g.grad_data(i)[k] != 0.0f) return false;
  }
  return true;
}

// Four tokens, top-1 over eight experts: at most four experts get tokens,
// and exactly those get gradients.
TEST(GptMoe, OnlyRoutedExpertsGetGradients) {
  GptConfig c = TinyConfig();
  c.experts = 8;
  c.top_k = 1;
  c.moe_every = 1;
  auto gpt = MakeGpt(c);
  const std::vector<int32_t> x = RandomTokens(4, 32, 3),
                             y = RandomTokens(4, 32, 4);
  ASSERT_TRUE(gpt->ForwardBackward(x.data(), y.data(), 1, 4).ok());
  const MoeStats s = gpt->moe_stats();
  ASSERT_EQ(s.load.size(), 2u);
  int idle = 0, kept = 0;
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 8; ++e) {
      kept += s.load[l][e];
      const std::string h =
          "h." + std::to_string(l) + ".moe.experts." + std::to_string(e) + ".";
      for (const char* t :
           {"fc.weight", "fc.bias", "proj.weight", "proj.bias"}) {
        EXPECT_EQ(AllZero(*gpt, Index(*gpt, h + t)), s.load[l][e] == 0)
            << h << t << " load " << s.load[l][e];
      }
      idle += s.load[l][e] == 0;
    }
  }
  EXPECT_EQ(kept + s.dropped, 2 * 4);
  EXPECT_GE(idle, 8);
  EXPECT_GT(s.aux_loss, 0);
}

// The pass names and waits for only the experts its routers chose, each
// after its layer's router; ParamUnused says which it did not read, and
// their gradients are zero. A recomputed forward waits for nothing.
TEST(GptMoe, WaitsOnlyForTheRoutedExperts) {
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "stored");
    GptConfig c = TinyConfig();
    c.experts = 8;
    c.top_k = 1;
    c.moe_every = 2;  // block 1
    c.recompute = recompute;
    auto gpt = MakeGpt(c);
    const std::vector<int32_t> x = RandomTokens(4, 32, 3),
                               y = RandomTokens(4, 32, 4);
    testing::ExpectWaitsOnlyForTheRoutedExperts(*gpt, x.data(), y.data(), 1, 4);
  }
}

// The gradient of the objective (cross-entropy plus each layer's aux loss)
// against central differences, for router and expert weights of a model
// with top-2, capacity drops and a strong aux loss: the gate and aux
// gradients reach the router, and each expert's pointers are its own.
TEST(GptMoe, GradientsMatchFiniteDifferences) {
  GptConfig c = TinyConfig();
  c.experts = 4;
  c.moe_every = 1;
  c.capacity = 0.75f;
  c.aux_loss = 0.5f;
  auto gpt = MakeGpt(c, 11);
  const int B = 2, T = 16;
  const std::vector<int32_t> x = RandomTokens(B * T, 32, 9),
                             y = RandomTokens(B * T, 32, 10);
  ASSERT_TRUE(gpt->ForwardBackward(x.data(), y.data(), B, T).ok());
  ASSERT_GT(gpt->moe_stats().dropped, 0);
  auto objective = [&] {
    auto loss = gpt->Loss(x.data(), y.data(), B, T);
    EXPECT_TRUE(loss.ok());
    return double{*loss} + gpt->moe_stats().aux_loss;
  };
  int checked = 0;
  for (const char* name :
       {"h.0.moe.router.weight", "h.1.moe.router.weight",
        "h.0.moe.experts.1.fc.weight", "h.1.moe.experts.2.proj.weight",
        "h.1.moe.experts.3.fc.bias"}) {
    const int i = Index(*gpt, name);
    for (int k : {0, 5, 13}) {
      float& w = gpt->param_data(i)[k];
      const float w0 = w, eps = 1e-3f;
      w = w0 + eps;
      const double up = objective();
      w = w0 - eps;
      const double down = objective();
      w = w0;
      const double fd = (up - down) / (2.0 * eps);
      const double g = gpt->grad_data(i)[k];
      EXPECT_NEAR(g, fd, 5e-4 + 0.05 * std::abs(fd)) << name << "[" << k << "]";
      checked += std::abs(fd) > 1e-3;
    }
  }
  // Most of the checked gradients are not near zero.
  EXPECT_GE(checked, 8);
}

TEST(GptMoe, RecomputeGivesTheSameGradients) {
  GptConfig c = TinyConfig();
  c.experts = 4;
  c.moe_every = 1;
  GptConfig r = c;
  r.recompute = true;
  auto a = MakeGpt(c), b = MakeGpt(r);
  const std::vector<int32_t> x = RandomTokens(32, 32, 5),
                             y = RandomTokens(32, 32, 6);
  ASSERT_TRUE(a->ForwardBackward(x.data(), y.data(), 2, 16).ok());
  ASSERT_TRUE(b->ForwardBackward(x.data(), y.data(), 2, 16).ok());
  for (size_t i = 0; i < a->params().size(); ++i) {
    const int64_t n = static_cast<int64_t>(a->params()[i].spec.numel());
    for (int64_t k = 0; k < n; ++k) {
      ASSERT_EQ(a->grad_data(i)[k], b->grad_data(i)[k])
          << a->params()[i].spec.name;
    }
  }
}

// Plain SGD on one repeated batch: top-2 over four experts in every block.
TEST(GptMoe, LearnsABatchByHeart) {
  GptConfig c = TinyConfig();
  c.experts = 4;
  c.moe_every = 1;
  auto gpt = MakeGpt(c);
  const std::vector<int32_t> x = RandomTokens(32, 32, 7),
                             y = RandomTokens(32, 32, 8);
  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    auto loss = gpt->ForwardBackward(x.data(), y.data(), 2, 16);
    ASSERT_TRUE(loss.ok()) << loss.status();
    if (step == 0) first = *loss;
    last = *loss;
    for (size_t i = 0; i < gpt->params().size(); ++i) {
      const int64_t n = static_cast<int64_t>(gpt->params()[i].spec.numel());
      for (int64_t k = 0; k < n; ++k) {
        gpt->param_data(i)[k] -= 0.5f * gpt->grad_data(i)[k];
      }
    }
  }
  EXPECT_LT(last, 0.5f * first) << first << " -> " << last;
}

TEST(GptMoe, SettingsAreCheckedAndKeptInModelJson) {
  GptConfig c = TinyConfig();
  c.experts = 4;
  c.top_k = 1;
  c.moe_every = 2;
  c.capacity = 2.0f;
  c.aux_loss = 0.05f;
  c.expert_hidden = 24;
  auto back = GptConfigFromJson(GptConfigToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->experts, 4);
  EXPECT_EQ(back->top_k, 1);
  EXPECT_EQ(back->moe_every, 2);
  EXPECT_EQ(back->capacity, 2.0f);
  EXPECT_EQ(back->aux_loss, 0.05f);
  EXPECT_EQ(back->expert_hidden, 24);
  EXPECT_EQ(GptConfigFromJson(GptConfigToJson(TinyConfig()))->experts, 0);
  // Each case: the setting the error names, and the change that breaks it.
  const std::vector<std::pair<const char*, std::function<void(GptConfig&)>>>
      cases = {
          {"top_k", [](GptConfig& b) { b.top_k = 3; }},
          {"top_k",
           [](GptConfig& b) {
             b.experts = 1;
             b.top_k = 2;
           }},
          {"moe_every", [](GptConfig& b) { b.moe_every = 3; }},
          {"capacity", [](GptConfig& b) { b.capacity = 0; }},
          {"capacity", [](GptConfig& b) { b.aux_loss = -1; }},
          {"experts", [](GptConfig& b) { b.experts = -1; }},
          {"expert_hidden", [](GptConfig& b) { b.expert_hidden = -2; }},
      };
  for (const auto& [name, change] : cases) {
    GptConfig b = c;
    change(b);
    const absl::Status s = b.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s;
  }
  EXPECT_FALSE(
      GptConfigFromJson(R"({"vocab":32,"context":16,"layers":2,"heads":2,)"
                        R"("width":16,"moe":{"experts":4}})")
          .ok());
}

}  // namespace
}  // namespace strata
