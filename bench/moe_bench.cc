// The MoE feed-forward layer (model/moe_layer.h), forward and backward on
// the CPU, against the dense GELU MLP with the same active parameters per
// token in the same run: E experts of `hidden` features, top-k, against one
// MLP of k x hidden features, so both spend the same GEMM FLOPs per token
// and the ratio is what routing, gathering, the combine and the experts'
// smaller GEMMs cost.
//
// Usage: moe_bench [--tokens N] [--width C] [--experts E] [--top_k K]
//                  [--capacity F] [--reps R]
// Prints: moe_tokens_per_s, dense_tokens_per_s, moe_ratio_to_dense,
//         moe_dropped_fraction.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/best_seconds.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "model/moe_layer.h"

namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("MoE layer against the dense MLP of the same active size");
  strata::MoeDims d;
  d.N = 1024;
  d.C = 768;
  d.experts = 8;
  d.top_k = 2;
  int reps = 3;
  app.add_option("--tokens", d.N)->check(CLI::PositiveNumber);
  app.add_option("--width", d.C)->check(CLI::PositiveNumber);
  app.add_option("--experts", d.experts)->check(CLI::PositiveNumber);
  app.add_option("--top_k", d.top_k)->check(CLI::Range(1, 2));
  app.add_option("--capacity", d.capacity_factor)->check(CLI::PositiveNumber);
  app.add_option("--reps", reps)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  d.hidden = 4 * d.C;
  auto layer = strata::MoeLayer::Create(d);
  if (!layer.ok()) {
    std::fprintf(stderr, "%s\n", layer.status().ToString().c_str());
    return 2;
  }
  const int N = d.N, C = d.C, H = d.hidden, E = d.experts;
  const size_t hc = size_t{1} * H * C;
  // Scaled as GPT-2 initializes them, so the router's choices spread.
  const std::vector<float> x = Random(size_t{1} * N * C, 1, 1.0f);
  const std::vector<float> router = Random(size_t{1} * E * C, 2, 0.02f);
  const std::vector<float> fc_w = Random(E * hc, 3, 0.02f);
  const std::vector<float> fc_b(size_t{1} * E * H, 0.0f);
  const std::vector<float> proj_w = Random(E * hc, 4, 0.02f);
  const std::vector<float> proj_b(size_t{1} * E * C, 0.0f);
  const std::vector<float> dout = Random(size_t{1} * N * C, 5, 1.0f);
  std::vector<float> out(size_t{1} * N * C), dx(out.size());
  std::vector<float> g_router(router.size()), g_fc_w(fc_w.size()),
      g_fc_b(fc_b.size()), g_proj_w(proj_w.size()), g_proj_b(proj_b.size());
  // Each expert's tensors apart, as the GPT holds them.
  auto each = [E](auto* v, size_t n) {
    std::vector<decltype(v)> out;
    for (int e = 0; e < E; ++e) out.push_back(v + e * n);
    return out;
  };
  const strata::MoeWeights w{router.data(), each(fc_w.data(), hc),
                             each(fc_b.data(), H), each(proj_w.data(), hc),
                             each(proj_b.data(), C)};
  const strata::MoeGrads g{g_router.data(), each(g_fc_w.data(), hc),
                           each(g_fc_b.data(), H), each(g_proj_w.data(), hc),
                           each(g_proj_b.data(), C)};
  bool failed = false;
  const double moe_s = strata::bench::BestSeconds(reps, [&] {
    failed |= !layer->Forward(w, x.data(), out.data()).ok();
    failed |=
        !layer->Backward(w, x.data(), dout.data(), 1.0f, g, dx.data()).ok();
  });
  if (failed) {
    std::fprintf(stderr, "the MoE forward failed\n");
    return 1;
  }

  // The dense MLP of top_k x hidden features: the same GEMM FLOPs a token.
  const int Hd = d.top_k * H;
  const std::vector<float> dfc_w = Random(size_t{1} * Hd * C, 6, 0.02f);
  const std::vector<float> dfc_b(Hd, 0.0f);
  const std::vector<float> dproj_w = Random(size_t{1} * C * Hd, 7, 0.02f);
  const std::vector<float> dproj_b(C, 0.0f);
  std::vector<float> pre(size_t{1} * N * Hd), post(pre.size()),
      dpost(pre.size());
  std::vector<float> gd_fc_w(dfc_w.size()), gd_fc_b(Hd),
      gd_proj_w(dproj_w.size()), gd_proj_b(C);
  namespace k = strata::kernels;
  const double dense_s = strata::bench::BestSeconds(reps, [&] {
    k::MatmulForward(pre.data(), x.data(), dfc_w.data(), dfc_b.data(), N, C,
                     Hd);
    k::GeluForward(post.data(), pre.data(), int64_t{N} * Hd);
    k::MatmulForward(out.data(), post.data(), dproj_w.data(), dproj_b.data(), N,
                     Hd, C);
    k::MatmulBackward(dpost.data(), gd_proj_w.data(), gd_proj_b.data(),
                      dout.data(), post.data(), dproj_w.data(), N, Hd, C);
    k::GeluBackward(dpost.data(), pre.data(), dpost.data(), int64_t{N} * Hd);
    k::MatmulBackward(dx.data(), gd_fc_w.data(), gd_fc_b.data(), dpost.data(),
                      x.data(), dfc_w.data(), N, C, Hd);
  });
  const strata::MoeRouting& r = layer->routing();
  std::printf("# N %d C %d experts %d top_k %d capacity %.2f (%d slots)\n", N,
              C, E, d.top_k, d.capacity_factor, d.Capacity());
  std::printf("# expert load:");
  for (int e = 0; e < E; ++e) std::printf(" %d", r.load[e]);
  std::printf("\n");
  std::printf("moe_tokens_per_s %.0f\n", N / moe_s);
  std::printf("dense_tokens_per_s %.0f\n", N / dense_s);
  std::printf("moe_ratio_to_dense %.3f\n", dense_s / moe_s);
  std::printf("moe_dropped_fraction %.4f\n",
              static_cast<double>(r.dropped) / (double{1} * N * d.top_k));
  return 0;
}
