// The mixture-of-experts kernels (kernels/cuda/moe_kernels.cuh) on the CPU
// emulation of testing/cuda/emulation.h with their launchers' geometry,
// against loops over a real routing (MoeRouter, top-2 with drops).
// Overwritten outputs start from garbage and accumulated ones from random
// values, so `=` and `+=` cannot be confused.
#include "testing/cuda/emulation.h"  // first: it configures the kernels
// (blank line keeps the include order)
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/moe_kernels.cuh"
#include "model/moe_router.h"
#include "testing/cuda/test_util.h"

namespace strata::kernels::cuda {
namespace {

using namespace moe;  // NOLINT: the kernels under test
using test_util::ExpectClose;
using test_util::RandomBf16;
using test_util::ToBf16;

// A top-2 routing of N tokens over E experts with drops, as the CUDA
// model packs it: rows expert by expert, src the token of each row, and
// row/gate per (token, choice).
struct Packed {
  int R = 0;
  std::vector<int32_t> src, row;
  std::vector<float> gate;
};

Packed Route(int N, int E, int K, float capacity) {
  MoeDims d{.N = N,
            .C = 8,
            .hidden = 8,
            .experts = E,
            .top_k = K,
            .capacity_factor = capacity};
  MoeRouter router(d);
  const std::vector<float> logits = RandomBf16(size_t{1} * N * E, 9, 2.0f);
  std::copy(logits.begin(), logits.end(), router.logits());
  EXPECT_TRUE(router.Route(nullptr).ok());
  const MoeRouting& r = router.routing();
  Packed p;
  std::vector<int> first(E);
  for (int e = 0; e < E; ++e) {
    first[e] = p.R;
    p.R += r.load[e];
    for (int t : r.tokens[e]) p.src.push_back(t);
  }
  p.row.assign(size_t{1} * N * K, -1);
  p.gate = r.gate;
  for (size_t a = 0; a < p.row.size(); ++a) {
    if (r.slot[a] >= 0) p.row[a] = first[r.expert[a]] + r.slot[a];
  }
  EXPECT_GT(r.dropped, 0);  // the case with drops is covered
  return p;
}

TEST(MoeKernelsEmulated, GatherCombineAndTheirBackward) {
  const int N = 37, E = 4, K = 2, C = 70;  // C not a multiple of 32
  const Packed p = Route(N, E, K, 0.75f);
  const int R = p.R;
  const std::vector<float> x = RandomBf16(size_t{1} * N * C, 1);
  const std::vector<float> y = RandomBf16(size_t{1} * R * C, 2);
  const std::vector<float> res = RandomBf16(size_t{1} * N * C, 3);
  const std::vector<float> dout = RandomBf16(size_t{1} * N * C, 4);
  const std::vector<float> din = RandomBf16(size_t{1} * R * C, 5);
  const std::vector<float> dx0 = RandomBf16(size_t{1} * N * C, 6);
  std::vector<float> want_in(size_t{1} * R * C),
      want_out = res, want_dy(size_t{1} * R * C), want_dgate(N * K, 0.0f),
      want_dx = dx0;
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) want_in[r * C + c] = x[p.src[r] * C + c];
  }
  for (int t = 0; t < N; ++t) {
    for (int k = 0; k < K; ++k) {
      const int r = p.row[t * K + k];
      if (r < 0) continue;
      const float g = p.gate[t * K + k];
      double dot = 0;
      for (int c = 0; c < C; ++c) {
        want_out[t * C + c] += g * y[r * C + c];
        want_dy[r * C + c] = g * dout[t * C + c];
        dot += double{dout[t * C + c]} * y[r * C + c];
        want_dx[t * C + c] += din[r * C + c];
      }
      want_dgate[t * K + k] = static_cast<float>(dot);
    }
  }

  const auto x_h = ToBf16(x), y_h = ToBf16(y), res_h = ToBf16(res);
  const auto dout_h = ToBf16(dout), din_h = ToBf16(din);
  const bf16 garbage = __float2bfloat16(1e30f);
  std::vector<bf16> in_h(size_t{1} * R * C, garbage);
  std::vector<bf16> out_h(size_t{1} * N * C, garbage);
  std::vector<bf16> dy_h(size_t{1} * R * C, garbage);
  std::vector<float> dgate_h(N * K, NAN);
  std::vector<bf16> dx_h = ToBf16(dx0);
  emu::RunGrid(dim3(Blocks(int64_t{R} * C, kThreads)), kThreads, 0, [&] {
    GatherRowsKernel(in_h.data(), x_h.data(), p.src.data(), R, C);
  });
  ExpectClose(in_h, want_in, 0, 0, "gathered");
  emu::RunGrid(dim3(Blocks(int64_t{N} * C, kThreads)), kThreads, 0, [&] {
    CombineKernel(out_h.data(), res_h.data(), y_h.data(), p.row.data(),
                  p.gate.data(), N, K, C);
  });
  ExpectClose(out_h, want_out, 2e-2, 1e-2, "out");
  emu::RunGrid(dim3(Blocks(int64_t{N} * K, kWarps)), kThreads, 0, [&] {
    CombineBackwardKernel(dy_h.data(), dgate_h.data(), dout_h.data(),
                          y_h.data(), p.row.data(), p.gate.data(),
                          int64_t{N} * K, K, C);
  });
  // Every packed row is some choice's: dy is written everywhere.
  ExpectClose(dy_h, want_dy, 1e-2, 1e-2, "dy");
  ExpectClose(dgate_h, want_dgate, 1e-3, 1e-4, "dgate");
  emu::RunGrid(dim3(Blocks(int64_t{N} * C, kThreads)), kThreads, 0, [&] {
    AddRowsKernel(dx_h.data(), din_h.data(), p.row.data(), N, K, C);
  });
  ExpectClose(dx_h, want_dx, 2e-2, 1e-2, "dx");
}

}  // namespace
}  // namespace strata::kernels::cuda
