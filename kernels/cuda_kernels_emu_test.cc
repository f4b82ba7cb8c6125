// CUDA kernels other than attention, run on the CPU emulation of
// kernels/cuda/emulation.h with their launchers' geometry and checked
// against the CPU kernels. Accumulated outputs start from random values and
// overwritten ones from garbage, so `=` and `+=` cannot be confused.
#include "kernels/cuda/emulation.h"  // first: it configures the kernels
// (blank line keeps the include order)
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/layernorm_kernels.cuh"
#include "kernels/cuda/matmul_kernels.cuh"
#include "kernels/layernorm.h"

namespace strata::kernels::cuda {
namespace {

std::vector<float> RandomBf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = __bfloat162float(__float2bfloat16(dist(rng)));
  return v;
}

std::vector<bf16> ToBf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

template <typename T>
float AsFloat(T x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __bfloat162float(x);
  } else {
    return x;
  }
}

template <typename T>
void ExpectClose(const std::vector<T>& got, const std::vector<float>& want,
                 double atol, double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(AsFloat(got[i]), want[i], atol + rtol * std::abs(want[i]))
        << what << "[" << i << "]";
  }
}

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
  // The launcher's grid, and a 2-block grid that makes the rows stride.
  for (const int blocks : {BackwardBlocks(N), 2}) {
    SCOPED_TRACE(blocks);
    std::vector<bf16> dinp_h = ToBf16(dinp0);
    std::vector<float> dw_h = dw0, db_h = db0;
    emu::RunGrid(dim3(blocks), kThreads, BackwardSharedBytes(C), [&] {
      LayerNormBackwardKernel(dinp_h.data(), dw_h.data(), db_h.data(),
                              dout_h.data(), inp_h.data(), w_h.data(),
                              mean.data(), rstd.data(), N, C);
    });
    ExpectClose(dinp_h, dinp, 2e-2, 2e-2, "dinp");
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
               [&] { AddBiasKernel(out_h.data(), bias_h.data(), N, OC); });
  ExpectClose(out_h, want, 1e-2, 1e-2, "out");

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

}  // namespace
}  // namespace strata::kernels::cuda
