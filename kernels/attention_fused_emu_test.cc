// The fused attention kernels (kernels/cuda/attention_fused_kernels.cuh)
// run on the CPU emulation of testing/cuda/emulation.h and checked against
// the CPU attention, for every head size they take and for lengths that
// leave partial tiles. This tests their logic on every machine; the parity
// tests in kernels_cuda_test.cc (label gpu) test them on the hardware.
#include "testing/cuda/emulation.h"  // first: it configures the kernels
// (blank line keeps the include order)
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/cuda/attention_fused_kernels.cuh"
#include "testing/cuda/test_util.h"

namespace strata::kernels::cuda::flash {
namespace {

using ::strata::kernels::cuda::test_util::ExpectClose;
using ::strata::kernels::cuda::test_util::RandomBf16;
using ::strata::kernels::cuda::test_util::ToBf16;

// The launch sequence of FusedAttentionForward and FusedAttentionBackward
// (attention_fused.cu), each launch on the emulator.
template <int HS>
void RunAndCheck(int B, int T, int NH) {
  const int C = HS * NH;
  SCOPED_TRACE(testing::Message()
               << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
  const int64_t N = int64_t{B} * T;
  const std::vector<float> qkv = RandomBf16(N * 3 * C, 1);
  const std::vector<float> dout = RandomBf16(N * C, 2);
  std::vector<float> out(N * C), att(int64_t{B} * NH * T * T);
  std::vector<float> dqkv(qkv.size()), scratch(att.size());
  ::strata::kernels::AttentionForward(out.data(), att.data(), qkv.data(), B, T,
                                      C, NH);
  ::strata::kernels::AttentionBackward(dqkv.data(), scratch.data(), dout.data(),
                                       qkv.data(), att.data(), B, T, C, NH);

  const std::vector<bf16> qkv_h = ToBf16(qkv), dout_h = ToBf16(dout);
  std::vector<bf16> out_h(N * C, __float2bfloat16(1e30f));
  std::vector<float> lse(int64_t{B} * NH * T);
  const int tiles = (T + kTile - 1) / kTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  emu::RunGrid(dim3(B * NH, tiles), kThreads, Dims<HS>::kForwardBytes, [&] {
    FlashForwardKernel<HS>(out_h.data(), lse.data(), qkv_h.data(), T, C, NH,
                           scale * kLog2e);
  });
  ExpectClose(out_h, out, 1e-2, 2e-2, "out");
  // lse is log2 of the softmax denominator of the scaled scores: check it
  // against the probabilities of the reference at the row's maximum.
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    for (int t = 0; t < T; ++t) {
      const float* q = qkv.data() + (int64_t{b} * T + t) * 3 * C + h * HS;
      float best = -INFINITY;
      int arg = 0;
      for (int j = 0; j <= t; ++j) {
        const float* k = qkv.data() + (int64_t{b} * T + j) * 3 * C + C + h * HS;
        float s = 0;
        for (int d = 0; d < HS; ++d) s += q[d] * k[d];
        if (s > best) best = s, arg = j;
      }
      // p(arg) = exp2(best * scale * log2e - lse).
      const float p =
          std::exp2(best * scale * kLog2e - lse[int64_t{bh} * T + t]);
      const float want = att[((int64_t{bh}) * T + t) * T + arg];
      ASSERT_NEAR(p, want, 1e-3 + 1e-2 * want) << "lse " << bh << "," << t;
    }
  }

  std::vector<float> dq_acc(N * C, 0.0f), D(int64_t{B} * NH * T);
  std::vector<bf16> dqkv_h(qkv.size(), __float2bfloat16(1e30f));
  const int64_t rows = N * NH;
  emu::RunGrid(dim3(static_cast<unsigned>((rows + kWarps - 1) / kWarps)),
               kThreads, 0, [&] {
                 RowDotKernel(D.data(), dout_h.data(), out_h.data(), rows, T,
                              NH, HS);
               });
  emu::RunGrid(dim3(B * NH, tiles), kThreads, Dims<HS>::kBackwardBytes, [&] {
    FlashBackwardKernel<HS>(dqkv_h.data(), dq_acc.data(), dout_h.data(),
                            qkv_h.data(), lse.data(), D.data(), T, C, NH, scale,
                            scale * kLog2e);
  });
  constexpr int kStoreThreads = 1024;
  emu::RunGrid(
      dim3(static_cast<unsigned>((N * C + kStoreThreads - 1) / kStoreThreads)),
      kStoreThreads, 0,
      [&] { StoreDqKernel(dqkv_h.data(), dq_acc.data(), N, C); });
  ExpectClose(dqkv_h, dqkv, 2e-2, 4e-2, "dqkv");
}

TEST(FusedAttentionEmulated, HeadSize32PartialTiles) {
  RunAndCheck<32>(2, 70, 2);
}

TEST(FusedAttentionEmulated, HeadSize64SeveralTiles) {
  RunAndCheck<64>(1, 150, 2);
}

TEST(FusedAttentionEmulated, HeadSize128WholeTile) {
  RunAndCheck<128>(1, 64, 1);
}

TEST(FusedAttentionEmulated, ShortSequence) { RunAndCheck<64>(3, 5, 1); }

// The emulator itself: a missing __syncwarp between a fragment store and
// reads of other lanes' elements is visible, as on the hardware.
TEST(CudaEmulation, ShufflesAndBarriersWork) {
  std::vector<float> sums(64);
  emu::RunGrid(dim3(2), 32, 0, [&] {
    const float v = static_cast<float>(threadIdx.x + 100 * blockIdx.x);
    sums[blockIdx.x * 32 + threadIdx.x] = WarpSum(v);
  });
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(sums[i], i < 32 ? 496.0f : 496.0f + 3200.0f) << i;
  }
}

}  // namespace
}  // namespace strata::kernels::cuda::flash
