// CUDA kernels other than attention, run on the CPU emulation of
// testing/cuda/emulation.h with their launchers' geometry and checked
// against the CPU kernels. Accumulated outputs start from random values and
// overwritten ones from garbage, so `=` and `+=` cannot be confused.
#include "testing/cuda/emulation.h"  // first: it configures the kernels
// (blank line keeps the include order)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/crossentropy.h"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/crossentropy_kernels.cuh"
#include "kernels/cuda/elementwise_kernels.cuh"
#include "kernels/cuda/layernorm_kernels.cuh"
#include "kernels/cuda/matmul_kernels.cuh"
#include "kernels/cuda/optimizer_kernels.cuh"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/residual.h"
#include "optim/optimizer.h"
#include "testing/cuda/test_util.h"

namespace strata::kernels::cuda {
namespace {

std::vector<float> RandomUniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> RandomTokens(size_t n, uint32_t seed, int V) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

using ::strata::kernels::cuda::test_util::ExpectClose;
using ::strata::kernels::cuda::test_util::RandomBf16;
using ::strata::kernels::cuda::test_util::ToBf16;

TEST(CudaKernelsEmulated, LayerNormForwardAndBackward) {
  using namespace layernorm;  // NOLINT
  const int N = 33, C = 80;   // a partial block of rows; C not a multiple of 32
  const std::vector<float> inp = RandomBf16(N * C, 1, 2.0f);
  const std::vector<float> w = RandomBf16(C, 2), b = RandomBf16(C, 3);
  const std::vector<float> dout = RandomBf16(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  ::strata::kernels::LayerNormForward(out.data(), mean.data(), rstd.data(),
                                      inp.data(), w.data(), b.data(), N, C);
  // Accumulated outputs start from random values on both sides.
  const std::vector<float> dinp0 = RandomBf16(N * C, 5);
  const std::vector<float> dw0 = RandomBf16(C, 6), db0 = RandomBf16(C, 7);
  std::vector<float> dinp = dinp0, dw = dw0, db = db0;
  ::strata::kernels::LayerNormBackward(dinp.data(), dw.data(), db.data(),
                                       dout.data(), inp.data(), w.data(),
                                       mean.data(), rstd.data(), N, C);

  const auto inp_h = ToBf16(inp), w_h = ToBf16(w), b_h = ToBf16(b);
  const auto dout_h = ToBf16(dout);
  std::vector<bf16> out_h(N * C, __float2bfloat16(1e30f));
  std::vector<float> mean_h(N, NAN), rstd_h(N, NAN);
  emu::RunGrid(dim3(Blocks(N, kWarpsPerBlock)), kThreads, 0, [&] {
    LayerNormForwardKernel(out_h.data(), mean_h.data(), rstd_h.data(),
                           inp_h.data(), w_h.data(), b_h.data(), N, C);
  });
  ExpectClose(out_h, out, 1e-2, 1e-2, "out");
  ExpectClose(mean_h, mean, 1e-5, 1e-5, "mean");
  ExpectClose(rstd_h, rstd, 1e-5, 1e-4, "rstd");
  for (const bool vec : {false, true}) {
    SCOPED_TRACE(vec);
    std::vector<bf16> dinp_h = ToBf16(dinp0);
    emu::RunGrid(dim3(Blocks(N, kWarpsPerBlock)), kThreads, 0, [&] {
      (vec ? LayerNormBackwardKernel<8>
           : LayerNormBackwardKernel<1>)(dinp_h.data(), dout_h.data(),
                                         inp_h.data(), w_h.data(), mean.data(),
                                         rstd.data(), N, C);
    });
    ExpectClose(dinp_h, dinp, 2e-2, 2e-2, "dinp");
  }
  // The launcher's grid, and 2 rows of blocks, which makes the rows stride.
  for (const dim3 grid :
       {ParamGradGrid(N, C), dim3(ParamGradGrid(N, C).x, 2)}) {
    SCOPED_TRACE(testing::Message() << grid.x << "x" << grid.y);
    std::vector<float> dw_h = dw0, db_h = db0;
    emu::RunGrid(grid, ParamGradBlock(), kParamGradSharedBytes, [&] {
      LayerNormParamGradKernel(dw_h.data(), db_h.data(), dout_h.data(),
                               inp_h.data(), mean.data(), rstd.data(), N, C);
    });
    ExpectClose(dw_h, dw, 1e-3, 1e-3, "dweight");
    ExpectClose(db_h, db, 1e-3, 1e-3, "dbias");
  }
}

TEST(CudaKernelsEmulated, BiasForwardAndBackward) {
  using namespace matmul;      // NOLINT
  const int N = 300, OC = 70;  // partial column and row blocks
  const std::vector<float> out0 = RandomBf16(N * OC, 1);
  const std::vector<float> bias = RandomBf16(OC, 2);
  std::vector<float> want(N * OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      want[n * OC + o] = out0[n * OC + o] + bias[o];
    }
  }
  std::vector<bf16> out_h = ToBf16(out0);
  const std::vector<bf16> bias_h = ToBf16(bias);
  emu::RunGrid(dim3(Blocks(int64_t{N} * OC, kThreads)), kThreads, 0,
               [&] { AddBiasKernel<1>(out_h.data(), bias_h.data(), N, OC); });
  ExpectClose(out_h, want, 1e-2, 1e-2, "out");
  // 8 elements a thread: rows of 72 (9 vectors), N * 72 / 8 = 2700 threads
  // (a partial block).
  {
    const int OC8 = 72;
    const std::vector<float> x = RandomBf16(N * OC8, 5);
    const std::vector<float> b8 = RandomBf16(OC8, 6);
    std::vector<float> want8(N * OC8);
    for (int i = 0; i < N * OC8; ++i) want8[i] = x[i] + b8[i % OC8];
    std::vector<bf16> x_h = ToBf16(x);
    const std::vector<bf16> b8_h = ToBf16(b8);
    emu::RunGrid(dim3(Blocks(int64_t{N} * OC8 / 8, kThreads)), kThreads, 0,
                 [&] { AddBiasKernel<8>(x_h.data(), b8_h.data(), N, OC8); });
    ExpectClose(x_h, want8, 1e-2, 1e-2, "out (8 a thread)");
  }

  const std::vector<float> dout = RandomBf16(N * OC, 3);
  const std::vector<float> db0 = RandomBf16(OC, 4);
  std::vector<float> db = db0;
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) db[o] += dout[n * OC + o];
  }
  const std::vector<bf16> dout_h = ToBf16(dout);
  const dim3 grid = BiasBackwardGrid(N, OC);
  EXPECT_EQ(grid.x, 3u);
  EXPECT_GT(grid.y, 1u);  // several row blocks add into each column
  std::vector<float> db_h = db0;
  emu::RunGrid(grid, BiasBackwardBlock(), kBiasBackwardSharedBytes,
               [&] { BiasBackwardKernel(db_h.data(), dout_h.data(), N, OC); });
  ExpectClose(db_h, db, 1e-3, 1e-4, "dbias");
}

TEST(CudaKernelsEmulated, EncoderForwardAndBackward) {
  using namespace elementwise;     // NOLINT
  const int B = 3, T = 7, C = 50;  // N * C = 1050: a partial block
  const int V = 11, P = T + 3;     // wpe has more rows than T
  const int64_t N = int64_t{B} * T;
  const std::vector<int32_t> tokens = RandomTokens(N, 1, V);  // repeats
  const std::vector<float> wte = RandomBf16(V * C, 2);
  const std::vector<float> wpe = RandomBf16(P * C, 3);
  std::vector<float> out(N * C);
  ::strata::kernels::EncoderForward(out.data(), tokens.data(), wte.data(),
                                    wpe.data(), B, T, C);
  const auto wte_h = ToBf16(wte), wpe_h = ToBf16(wpe);
  std::vector<bf16> out_h(N * C, __float2bfloat16(1e30f));
  emu::RunGrid(dim3(ElementBlocks(N * C)), kThreads, 0, [&] {
    EncoderForwardKernel(out_h.data(), tokens.data(), wte_h.data(),
                         wpe_h.data(), N, T, C);
  });
  ExpectClose(out_h, out, 1e-2, 2e-2, "out");

  const std::vector<float> dout = RandomBf16(N * C, 4);
  const std::vector<float> dwte0 = RandomBf16(V * C, 5);
  const std::vector<float> dwpe0 = RandomBf16(P * C, 6);
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  ::strata::kernels::EncoderBackward(dwte.data(), dwpe.data(), dout.data(),
                                     tokens.data(), B, T, C);
  const auto dout_h = ToBf16(dout);
  std::vector<float> dwte_h = dwte0, dwpe_h = dwpe0;
  emu::RunGrid(dim3(ElementBlocks(N * C)), kThreads, 0, [&] {
    EncoderBackwardKernel(dwte_h.data(), dwpe_h.data(), dout_h.data(),
                          tokens.data(), N, T, C);
  });
  ExpectClose(dwte_h, dwte, 1e-5, 1e-5, "dwte");
  ExpectClose(dwpe_h, dwpe, 1e-5, 1e-5, "dwpe");
}

// Elementwise kernels take 1 or 8 elements per thread (kN); each test runs
// both.
template <int kN>
dim3 ElementGrid(int64_t n) {
  return dim3(::strata::kernels::cuda::elementwise::ElementBlocks(n / kN));
}

TEST(CudaKernelsEmulated, GeluForwardAndBackward) {
  using namespace elementwise;  // NOLINT
  const int64_t n = 4000;       // a partial block, with 1 and 8 a thread
  const std::vector<float> inp = RandomBf16(n, 1, 2.0f);
  const std::vector<float> dout = RandomBf16(n, 2);
  std::vector<float> out(n), dinp(n);
  ::strata::kernels::GeluForward(out.data(), inp.data(), n);
  ::strata::kernels::GeluBackward(dinp.data(), inp.data(), dout.data(), n);
  const auto inp_h = ToBf16(inp), dout_h = ToBf16(dout);
  auto check = [&](auto kn) {
    constexpr int kN = decltype(kn)::value;
    SCOPED_TRACE(kN);
    std::vector<bf16> out_h(n, __float2bfloat16(1e30f));
    std::vector<bf16> dinp_h(n, __float2bfloat16(1e30f));
    emu::RunGrid(ElementGrid<kN>(n), kThreads, 0,
                 [&] { GeluForwardKernel<kN>(out_h.data(), inp_h.data(), n); });
    emu::RunGrid(ElementGrid<kN>(n), kThreads, 0, [&] {
      GeluBackwardKernel<kN>(dinp_h.data(), inp_h.data(), dout_h.data(), n);
    });
    ExpectClose(out_h, out, 1e-2, 2e-2, "out");
    ExpectClose(dinp_h, dinp, 1e-2, 2e-2, "dinp");
  };
  check(std::integral_constant<int, 1>());
  check(std::integral_constant<int, 8>());
}

// The fused bias forms: pre + bias then GELU; a + (b + bias).
TEST(CudaKernelsEmulated, BiasGeluAndBiasResidual) {
  using namespace elementwise;  // NOLINT
  const int N = 37, OC = 96;
  const int64_t n = int64_t{N} * OC;
  const std::vector<float> pre0 = RandomBf16(n, 1, 2.0f);
  const std::vector<float> a = RandomBf16(n, 2);
  const std::vector<float> bias = RandomBf16(OC, 3);
  std::vector<float> pre(n), act(n), res(n);
  for (int64_t i = 0; i < n; ++i) {
    pre[i] = pre0[i] + bias[i % OC];
    res[i] = a[i] + pre[i];
  }
  ::strata::kernels::GeluForward(act.data(), pre.data(), n);
  const auto pre0_h = ToBf16(pre0), a_h = ToBf16(a), bias_h = ToBf16(bias);
  auto check = [&](auto kn) {
    constexpr int kN = decltype(kn)::value;
    SCOPED_TRACE(kN);
    std::vector<bf16> pre_h = pre0_h;
    std::vector<bf16> act_h(n, __float2bfloat16(1e30f));
    std::vector<bf16> res_h(n, __float2bfloat16(1e30f));
    emu::RunGrid(ElementGrid<kN>(n), kThreads, 0, [&] {
      BiasGeluForwardKernel<kN>(act_h.data(), pre_h.data(), bias_h.data(), n,
                                OC);
    });
    emu::RunGrid(ElementGrid<kN>(n), kThreads, 0, [&] {
      ResidualForwardKernel<kN>(res_h.data(), a_h.data(), pre0_h.data(),
                                bias_h.data(), n, OC);
    });
    ExpectClose(pre_h, pre, 1e-2, 2e-2, "pre");
    ExpectClose(act_h, act, 1e-2, 2e-2, "gelu");
    ExpectClose(res_h, res, 1e-2, 2e-2, "residual");
  };
  check(std::integral_constant<int, 1>());
  check(std::integral_constant<int, 8>());
}

TEST(CudaKernelsEmulated, ResidualForwardAndBackward) {
  using namespace elementwise;  // NOLINT
  const int64_t n = 4000;       // a partial block, with 1 and 8 a thread
  const std::vector<float> a = RandomBf16(n, 1), b = RandomBf16(n, 2);
  const std::vector<float> dout = RandomBf16(n, 3);
  const std::vector<float> da0 = RandomBf16(n, 4), db0 = RandomBf16(n, 5);
  std::vector<float> out(n), da = da0, db = db0;
  ::strata::kernels::ResidualForward(out.data(), a.data(), b.data(), n);
  ::strata::kernels::ResidualBackward(da.data(), db.data(), dout.data(), n);
  const auto a_h = ToBf16(a), b_h = ToBf16(b), dout_h = ToBf16(dout);
  auto check = [&](auto kn) {
    constexpr int kN = decltype(kn)::value;
    SCOPED_TRACE(kN);
    std::vector<bf16> out_h(n, __float2bfloat16(1e30f));
    emu::RunGrid(ElementGrid<kN>(n), kThreads, 0, [&] {
      ResidualForwardKernel<kN>(out_h.data(), a_h.data(), b_h.data(), nullptr,
                                n, 1);
    });
    ExpectClose(out_h, out, 1e-2, 2e-2, "out");
  };
  check(std::integral_constant<int, 1>());
  check(std::integral_constant<int, 8>());
  std::vector<bf16> da_h = ToBf16(da0), db_h = ToBf16(db0);
  emu::RunGrid(dim3(ElementBlocks(n)), kThreads, 0, [&] {
    ResidualBackwardKernel(da_h.data(), db_h.data(), dout_h.data(), n);
  });
  ExpectClose(da_h, da, 1e-2, 2e-2, "da");
  ExpectClose(db_h, db, 1e-2, 2e-2, "db");
}

TEST(CudaKernelsEmulated, SoftmaxCrossEntropy) {
  using namespace crossentropy;  // NOLINT
  const int N = 5;
  const float dloss = 1.0f / N;
  // More columns than threads, not a multiple of them; and fewer, so that
  // whole warps hold nothing. Rows padded to ld, as the LM head's padded
  // vocabulary: huge logits there that must be ignored, gradients 0.
  for (const auto& [V, ld] : {std::pair{1000, 1000}, std::pair{1000, 1152},
                              std::pair{100, 100}, std::pair{100, 640}}) {
    SCOPED_TRACE(testing::Message() << "V " << V << " ld " << ld);
    const std::vector<float> logits = RandomBf16(N * V, 1, 3.0f);
    const std::vector<int32_t> targets = RandomTokens(N, 2, V);
    std::vector<float> dlogits = logits, losses(N);
    ::strata::kernels::SoftmaxCrossEntropyFused(dlogits.data(), targets.data(),
                                                dloss, losses.data(), N, V);
    std::vector<float> padded(N * ld, 1e30f);
    for (int n = 0; n < N; ++n) {
      std::copy_n(logits.begin() + n * V, V, padded.begin() + n * ld);
    }
    for (const bool staged : {false, true}) {
      SCOPED_TRACE(staged ? "staged" : "two reads");
      std::vector<bf16> dlogits_h(N * ld, __float2bfloat16(1e30f));
      std::vector<float> losses_h(N, NAN);
      if (staged) {
        emu::RunGrid(dim3(N), kStagedThreads, StagedSharedBytes(V), [&] {
          SoftmaxCrossEntropyKernel<kStagedThreads, true>(
              dlogits_h.data(), losses_h.data(), padded.data(), targets.data(),
              dloss, V, ld);
        });
      } else {
        emu::RunGrid(dim3(N), kThreads, kSharedBytes, [&] {
          SoftmaxCrossEntropyKernel<kThreads, false>(
              dlogits_h.data(), losses_h.data(), padded.data(), targets.data(),
              dloss, V, ld);
        });
      }
      ExpectClose(losses_h, losses, 1e-5, 1e-5, "losses");
      std::vector<bf16> got_v;
      for (int n = 0; n < N; ++n) {
        got_v.insert(got_v.end(), dlogits_h.begin() + n * ld,
                     dlogits_h.begin() + n * ld + V);
        for (int v = V; v < ld; ++v) {
          ASSERT_EQ(__bfloat162float(dlogits_h[n * ld + v]), 0.0f)
              << n << "," << v;
        }
      }
      // Most gradients are far below 1 (softmax * dloss): a tighter atol.
      ExpectClose(got_v, dlogits, 1e-5, 2e-2, "dlogits");
    }
  }
}

TEST(CudaKernelsEmulated, CausalSoftmaxAndBackward) {
  using namespace unfused;  // NOLINT
  // rows = (B * NH) * T = 111: a partial block of warps; T > 32, so late
  // rows take two passes of a warp.
  const int BH = 3, T = 37;
  const int64_t rows = int64_t{BH} * T;
  // Columns above t hold scores too (cuBLAS computes them), which the
  // kernel must ignore: large ones, so that taking them into the max shows.
  std::vector<float> scores = RandomBf16(rows * T, 1, 2.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = static_cast<int>(r % T) + 1; j < T; ++j) {
      scores[r * T + j] = 1e4f;
    }
  }
  std::vector<float> att(rows * T);
  for (int64_t r = 0; r < rows; ++r) {
    const int t = static_cast<int>(r % T);
    const float* s = scores.data() + r * T;
    const double m = *std::max_element(s, s + t + 1);
    double sum = 0;
    for (int j = 0; j <= t; ++j) sum += std::exp(s[j] - m);
    for (int j = 0; j < T; ++j) {
      att[r * T + j] =
          j <= t ? static_cast<float>(std::exp(s[j] - m) / sum) : 0.0f;
    }
  }
  std::vector<bf16> att_h(rows * T, __float2bfloat16(1e30f));
  emu::RunGrid(dim3(SoftmaxBlocks(rows)), kThreads, 0, [&] {
    CausalSoftmaxKernel(att_h.data(), scores.data(), rows, T);
  });
  // Probabilities are mostly far below 1: a tighter atol.
  ExpectClose(att_h, att, 1e-4, 2e-2, "att");

  // Any probabilities will do for the formula; above t they must be ignored.
  const std::vector<float> p = RandomUniform(rows * T, 2, 0.0f, 1.0f);
  const std::vector<bf16> p_h = ToBf16(p);
  const std::vector<float> dscores = RandomBf16(rows * T, 3);
  std::vector<float> dsoft(rows * T);
  for (int64_t r = 0; r < rows; ++r) {
    const int t = static_cast<int>(r % T);
    double dot = 0;
    for (int j = 0; j <= t; ++j) {
      dot += double{__bfloat162float(p_h[r * T + j])} * dscores[r * T + j];
    }
    for (int j = 0; j < T; ++j) {
      dsoft[r * T + j] =
          j <= t ? static_cast<float>(__bfloat162float(p_h[r * T + j]) *
                                      (dscores[r * T + j] - dot))
                 : 0.0f;
    }
  }
  std::vector<bf16> dsoft_h(rows * T, __float2bfloat16(1e30f));
  emu::RunGrid(dim3(SoftmaxBlocks(rows)), kThreads, 0, [&] {
    SoftmaxBackwardKernel(dsoft_h.data(), dscores.data(), p_h.data(), rows, T);
  });
  ExpectClose(dsoft_h, dsoft, 1e-2, 2e-2, "dsoft");
}

TEST(CudaKernelsEmulated, Adam) {
  using namespace optimizer;  // NOLINT
  const int64_t n = 1000;     // a partial block
  const float lr = 1e-2f;
  const int64_t t = 3;
  const std::vector<float> w0 = RandomBf16(n, 1), m0 = RandomBf16(n, 2, 0.1f);
  const std::vector<float> v0 = RandomUniform(n, 3, 0.0f, 0.01f);
  const std::vector<float> g = RandomBf16(n, 4);
  for (const auto kind : {OptimizerParams::kAdam, OptimizerParams::kAdamW}) {
    SCOPED_TRACE(kind);
    OptimizerParams params;
    params.kind = kind;
    params.lr = lr;
    params.weight_decay = 0.1f;
    std::vector<float> w = w0, m = m0, v = v0;
    ApplyUpdate(params, lr, t, w.data(), m.data(), v.data(), g.data(), n);
    std::vector<float> w_rounded(n);
    for (int64_t i = 0; i < n; ++i) {
      w_rounded[i] = __bfloat162float(__float2bfloat16(w[i]));
    }
    const AdamStep step = MakeAdamStep(params, lr, t);
    // The launcher's grid, and a 2-block grid that makes the loop stride
    // (with and without the bf16 copy).
    for (const int blocks : {AdamBlocks(n), 2}) {
      SCOPED_TRACE(blocks);
      std::vector<float> w_h = w0, m_h = m0, v_h = v0;
      std::vector<bf16> w_bf16(n, __float2bfloat16(1e30f));
      bf16* copy = blocks == 2 ? nullptr : w_bf16.data();
      emu::RunGrid(dim3(blocks), kThreads, 0, [&] {
        AdamKernel(w_h.data(), copy, m_h.data(), v_h.data(), g.data(), n, step);
      });
      ExpectClose(w_h, w, 1e-7, 1e-6, "w");
      ExpectClose(m_h, m, 1e-7, 1e-6, "m");
      ExpectClose(v_h, v, 1e-9, 1e-6, "v");
      if (copy != nullptr) ExpectClose(w_bf16, w_rounded, 0, 0, "w_bf16");
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
