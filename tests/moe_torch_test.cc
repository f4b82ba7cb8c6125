// The MoE feed-forward layer (model/moe_layer.h) against an independent
// one in PyTorch (tests/moe_torch.py, float64 autograd, Debian's
// python3-torch): the same routing, output, auxiliary loss and gradients
// of every weight and of the input, top-1 and top-2, with and without
// capacity drops.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/moe_layer.h"
#include "nlohmann/json.hpp"
#include "testing/temp_dir.h"
#include "tests/process_util.h"

namespace strata {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

bool HaveTorch() {
  return std::system(absl::StrCat(kPython, " -c 'import torch, numpy' ",
                                  ">/dev/null 2>&1")
                         .c_str()) == 0;
}

std::vector<float> Random(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void Write(const std::string& path, const std::vector<float>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::vector<float> Read(const std::string& path) {
  const std::string bytes = testing::ReadFile(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// Pointers to E tensors of `each` floats laid end to end in v.
template <typename F>
std::vector<F*> Experts(F* v, int E, size_t each) {
  std::vector<F*> out;
  for (int e = 0; e < E; ++e) out.push_back(v + e * each);
  return out;
}

// The largest |a - b|, and that both have n values.
float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, std::abs(a[i] - b[i]));
  }
  return d;
}

struct Case {
  int top_k;
  float capacity_factor;
  bool drops;  // whether this capacity drops assignments
};

class MoeTorch : public ::testing::TestWithParam<Case> {};

TEST_P(MoeTorch, MatchesPyTorch) {
  if (!HaveTorch()) GTEST_SKIP() << kPython << " has no torch";
  const Case c = GetParam();
  MoeDims d;
  d.N = 48;
  d.C = 16;
  d.hidden = 64;
  d.experts = 4;
  d.top_k = c.top_k;
  d.capacity_factor = c.capacity_factor;
  d.aux_alpha = 0.01f;
  const float daux = 3.0f;  // so the auxiliary loss's gradient shows
  const int N = d.N, C = d.C, H = d.hidden, E = d.experts;
  auto layer = MoeLayer::Create(d);
  ASSERT_TRUE(layer.ok()) << layer.status();
  std::vector<float> x = Random(size_t{1} * N * C, 1, 1.0f);
  std::vector<float> router = Random(size_t{1} * E * C, 2, 0.5f);
  std::vector<float> fc_w = Random(size_t{1} * E * H * C, 3, 0.2f);
  std::vector<float> fc_b = Random(size_t{1} * E * H, 4, 0.1f);
  std::vector<float> proj_w = Random(size_t{1} * E * C * H, 5, 0.2f);
  std::vector<float> proj_b = Random(size_t{1} * E * C, 6, 0.1f);
  std::vector<float> dout = Random(size_t{1} * N * C, 7, 1.0f);
  const size_t hc = size_t{1} * H * C;
  const MoeWeights w{router.data(), Experts<const float>(fc_w.data(), E, hc),
                     Experts<const float>(fc_b.data(), E, H),
                     Experts<const float>(proj_w.data(), E, hc),
                     Experts<const float>(proj_b.data(), E, C)};
  std::vector<float> out(size_t{1} * N * C), dx(out.size());
  std::vector<float> g_router(router.size()), g_fc_w(fc_w.size()),
      g_fc_b(fc_b.size()), g_proj_w(proj_w.size()), g_proj_b(proj_b.size());
  ASSERT_TRUE(layer->Forward(w, x.data(), out.data()).ok());
  ASSERT_TRUE(layer
                  ->Backward(w, x.data(), dout.data(), daux,
                             {g_router.data(), Experts(g_fc_w.data(), E, hc),
                              Experts(g_fc_b.data(), E, H),
                              Experts(g_proj_w.data(), E, hc),
                              Experts(g_proj_b.data(), E, C)},
                             dx.data())
                  .ok());

  const std::string dir = testing::FreshDir("moe_torch");
  const nlohmann::json cfg = {{"N", N},
                              {"C", C},
                              {"H", H},
                              {"E", E},
                              {"K", d.top_k},
                              {"capacity_factor", d.capacity_factor},
                              {"alpha", d.aux_alpha},
                              {"daux", daux}};
  std::ofstream(dir + "/cfg.json") << cfg.dump();
  Write(dir + "/x", x);
  Write(dir + "/router", router);
  Write(dir + "/fc_w", fc_w);
  Write(dir + "/fc_b", fc_b);
  Write(dir + "/proj_w", proj_w);
  Write(dir + "/proj_b", proj_b);
  Write(dir + "/dout", dout);
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", STRATA_SOURCE_DIR,
                                     "/tests/moe_torch.py ", dir)
                            .c_str()),
            0);
  const nlohmann::json ref =
      nlohmann::json::parse(testing::ReadFile(dir + "/ref.json"));

  // The same routing: each token's experts, and which choices were kept.
  const MoeRouting& r = layer->routing();
  for (int t = 0; t < N; ++t) {
    for (int k = 0; k < d.top_k; ++k) {
      const size_t a = size_t{1} * t * d.top_k + k;
      ASSERT_EQ(r.expert[a], ref["experts"][t][k].get<int>()) << t << "," << k;
      ASSERT_EQ(r.slot[a] >= 0, ref["kept"][t][k].get<bool>()) << t << "," << k;
    }
  }
  EXPECT_EQ(r.dropped, ref["dropped"].get<int64_t>());
  EXPECT_EQ(r.dropped > 0, c.drops) << r.dropped;
  int kept = 0;
  for (int e = 0; e < E; ++e) {
    EXPECT_LE(r.load[e], d.Capacity());
    kept += r.load[e];
  }
  EXPECT_EQ(kept + r.dropped, N * d.top_k);
  EXPECT_NEAR(r.aux_loss, ref["aux"].get<double>(), 1e-7);

  EXPECT_LE(MaxDiff(out, Read(dir + "/out")), 1e-5f);
  EXPECT_LE(MaxDiff(dx, Read(dir + "/dx")), 1e-5f);
  EXPECT_LE(MaxDiff(g_router, Read(dir + "/d_router")), 1e-5f);
  EXPECT_LE(MaxDiff(g_fc_w, Read(dir + "/d_fc_w")), 1e-5f);
  EXPECT_LE(MaxDiff(g_fc_b, Read(dir + "/d_fc_b")), 1e-5f);
  EXPECT_LE(MaxDiff(g_proj_w, Read(dir + "/d_proj_w")), 1e-5f);
  EXPECT_LE(MaxDiff(g_proj_b, Read(dir + "/d_proj_b")), 1e-5f);
  // The router's gradient is not only the auxiliary loss's.
  float biggest = 0;
  for (float v : g_router) biggest = std::max(biggest, std::abs(v));
  EXPECT_GT(biggest, 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(
    Gating, MoeTorch,
    ::testing::Values(Case{1, 4.0f, false}, Case{2, 2.0f, false},
                      Case{1, 0.75f, true}, Case{2, 0.5f, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat("top", info.param.top_k,
                          info.param.drops ? "_drops" : "_no_drops");
    });

TEST(MoeLayer, RefusesBadSettings) {
  MoeDims d{.N = 8, .C = 4, .hidden = 16, .experts = 2, .top_k = 2};
  EXPECT_TRUE(MoeLayer::Create(d).ok());
  for (auto bad :
       {MoeDims{d.N, d.C, d.hidden, 1, 2}, MoeDims{d.N, d.C, d.hidden, 2, 3},
        MoeDims{0, d.C, d.hidden, 2, 1},
        MoeDims{d.N, d.C, d.hidden, 2, 1, 0.0f},
        MoeDims{d.N, d.C, d.hidden, 2, 1, 1.0f, -1.0f}}) {
    const auto layer = MoeLayer::Create(bad);
    EXPECT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument)
        << layer.status();
  }
  EXPECT_EQ((MoeDims{.N = 10, .experts = 4, .top_k = 2}).Capacity(), 7);
}

TEST(MoeLayer, RefusesRouterLogitsThatAreNotFinite) {
  MoeDims d{.N = 2, .C = 2, .hidden = 4, .experts = 2, .top_k = 1};
  auto layer = MoeLayer::Create(d);
  ASSERT_TRUE(layer.ok());
  std::vector<float> x = {1, 2, std::numeric_limits<float>::quiet_NaN(), 0};
  std::vector<float> router(4, 0.5f), fc_w(16, 0.1f), fc_b(8), proj_w(16),
      proj_b(4), out(4);
  MoeWeights w{router.data(), Experts<const float>(fc_w.data(), 2, 8),
               Experts<const float>(fc_b.data(), 2, 4),
               Experts<const float>(proj_w.data(), 2, 8),
               Experts<const float>(proj_b.data(), 2, 2)};
  const absl::Status s = layer->Forward(w, x.data(), out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 1"), std::string::npos) << s;
  // A NaN in the second expert's router row only: token 0's row has a
  // finite largest logit and a NaN beside it.
  x[2] = 0;
  router[3] = std::numeric_limits<float>::quiet_NaN();
  const absl::Status nan = layer->Forward(w, x.data(), out.data());
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nan.message().find("token 0"), std::string::npos) << nan;
  router[3] = 0.5f;
  // One expert's tensors short.
  w.proj_b.pop_back();
  x[2] = 0;
  EXPECT_EQ(layer->Forward(w, x.data(), out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
