// Tensor-parallel layers against the unsplit ones (kernels/): each rank's
// shard of the weights is cut from the full matrices by SplitDim (zero
// padding where the split does not divide), and the outputs and gradients
// must match the unsplit layer's within 1e-5, for 1 to 4 ranks, with widths
// and a vocabulary that no rank count divides.
#include "model_parallel/tensor_parallel.h"

#include <cmath>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "collective/inproc_communicator.h"
#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"

namespace strata {
namespace {

constexpr int kN = 5;   // rows
constexpr int kC = 6;   // model width
constexpr int kH = 11;  // hidden width (prime: no rank count divides it)
constexpr int kV = 13;  // vocabulary (prime)
constexpr float kTol = 1e-5f;

std::vector<float> Fill(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.5f * std::sin(seed + 0.731f * i);
  return v;
}

// Rows [s.begin, s.begin + s.size) of a (rows, cols) matrix, zero past
// `rows`.
std::vector<float> RowShard(const std::vector<float>& m, int cols, DimShard s) {
  std::vector<float> out(size_t(s.size) * cols, 0.0f);
  for (int r = 0; r < s.valid; ++r) {
    std::copy_n(m.begin() + size_t(s.begin + r) * cols, cols,
                out.begin() + size_t(r) * cols);
  }
  return out;
}

// Columns [s.begin, s.begin + s.size) of a (rows, cols) matrix, zero past
// `cols`.
std::vector<float> ColShard(const std::vector<float>& m, int rows, int cols,
                            DimShard s) {
  std::vector<float> out(size_t(rows) * s.size, 0.0f);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < s.valid; ++c) {
      out[size_t(r) * s.size + c] = m[size_t(r) * cols + s.begin + c];
    }
  }
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], kTol + kTol * std::fabs(want[i]))
        << what << " element " << i;
  }
}

void OnRanks(int ranks, const std::function<void(Communicator&)>& fn) {
  auto comms = MakeInProcGroup(ranks);
  ASSERT_TRUE(comms.ok());
  std::vector<std::thread> threads;
  for (auto& c : *comms) threads.emplace_back([&fn, c = c.get()] { fn(*c); });
  for (auto& t : threads) t.join();
}

TEST(SplitDim, PadsTheLastShards) {
  DimShard s = SplitDim(13, 4, 3);
  EXPECT_EQ(s.begin, 12);
  EXPECT_EQ(s.size, 4);
  EXPECT_EQ(s.valid, 1);
  s = SplitDim(3, 4, 3);  // more ranks than entries: an empty shard
  EXPECT_EQ(s.valid, 0);
  s = SplitDim(12, 3, 1);
  EXPECT_EQ(s.begin, 4);
  EXPECT_EQ(s.valid, 4);
}

// Megatron's MLP: h = gelu(x W1^T + b1) column-parallel over the hidden
// width, y = h W2^T + b2 row-parallel; forward and backward.
TEST(TensorParallel, MlpMatchesTheUnsplitLayers) {
  const std::vector<float> x = Fill(kN * kC, 1), w1 = Fill(kH * kC, 2),
                           b1 = Fill(kH, 3), w2 = Fill(kC * kH, 4),
                           b2 = Fill(kC, 5), dy = Fill(kN * kC, 6);
  // Unsplit.
  std::vector<float> pre(kN * kH), h(kN * kH), y(kN * kC);
  kernels::MatmulForward(pre.data(), x.data(), w1.data(), b1.data(), kN, kC,
                         kH);
  kernels::GeluForward(h.data(), pre.data(), kN * kH);
  kernels::MatmulForward(y.data(), h.data(), w2.data(), b2.data(), kN, kH, kC);
  std::vector<float> dh(kN * kH), dpre(kN * kH), dx(kN * kC),
      dw1(kH * kC, 0.0f), db1(kH, 0.0f), dw2(kC * kH, 0.0f), db2(kC, 0.0f);
  kernels::MatmulBackward(dh.data(), dw2.data(), db2.data(), dy.data(),
                          h.data(), w2.data(), kN, kH, kC);
  kernels::GeluBackward(dpre.data(), pre.data(), dh.data(), kN * kH);
  kernels::MatmulBackward(dx.data(), dw1.data(), db1.data(), dpre.data(),
                          x.data(), w1.data(), kN, kC, kH);

  for (int ranks = 1; ranks <= 4; ++ranks) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    OnRanks(ranks, [&](Communicator& c) {
      const DimShard s = SplitDim(kH, c.size(), c.rank());
      const std::vector<float> w1l = RowShard(w1, kC, s),
                               b1l = RowShard(b1, 1, s),
                               w2l = ColShard(w2, kC, kH, s);
      std::vector<float> prel(kN * s.size), hl(kN * s.size), yl(kN * kC);
      ColumnParallelForward(prel.data(), x.data(), w1l.data(), b1l.data(), kN,
                            kC, s.size);
      kernels::GeluForward(hl.data(), prel.data(), kN * s.size);
      ASSERT_TRUE(RowParallelForward(c, yl.data(), hl.data(), w2l.data(),
                                     b2.data(), kN, s.size, kC)
                      .ok());
      ExpectNear(yl, y, "output");
      std::vector<float> dhl(kN * s.size), dprel(kN * s.size), dxl(kN * kC),
          dw1l(s.size * kC, 0.0f), db1l(s.size, 0.0f), dw2l(kC * s.size, 0.0f),
          db2l(kC, 0.0f);
      RowParallelBackward(dhl.data(), dw2l.data(), db2l.data(), dy.data(),
                          hl.data(), w2l.data(), kN, s.size, kC);
      kernels::GeluBackward(dprel.data(), prel.data(), dhl.data(), kN * s.size);
      ASSERT_TRUE(ColumnParallelBackward(c, dxl.data(), dw1l.data(),
                                         db1l.data(), dprel.data(), x.data(),
                                         w1l.data(), kN, kC, s.size)
                      .ok());
      ExpectNear(dxl, dx, "input gradient");
      ExpectNear(db2l, db2, "b2 gradient");
      // This rank's rows of dW1 and db1 and columns of dW2 (padding aside).
      ExpectNear(std::vector<float>(dw1l.begin(), dw1l.begin() + s.valid * kC),
                 std::vector<float>(dw1.begin() + s.begin * kC,
                                    dw1.begin() + (s.begin + s.valid) * kC),
                 "W1 gradient");
      ExpectNear(std::vector<float>(db1l.begin(), db1l.begin() + s.valid),
                 std::vector<float>(db1.begin() + s.begin,
                                    db1.begin() + s.begin + s.valid),
                 "b1 gradient");
      ExpectNear(ColShard(dw2l, kC, s.size, {0, s.valid, s.valid}),
                 ColShard(dw2, kC, kH, {s.begin, s.valid, s.valid}),
                 "W2 gradient");
    });
  }
}

// Attention split by heads: QKV column-parallel over the heads' rows,
// each rank's heads attended locally, the output projection row-parallel.
// 3 heads over up to 4 ranks: uneven shares and a rank of padding only.
TEST(TensorParallel, AttentionSplitByHeadsMatchesTheUnsplitBlock) {
  constexpr int B = 2, T = 4, NH = 3, hs = 2, C = NH * hs, N = B * T;
  const std::vector<float> x = Fill(N * C, 11), wqkv = Fill(3 * C * C, 12),
                           bqkv = Fill(3 * C, 13), wo = Fill(C * C, 14),
                           bo = Fill(C, 15), dy = Fill(N * C, 16);
  std::vector<float> qkv(N * 3 * C), att(B * NH * T * T), a(N * C), y(N * C);
  kernels::MatmulForward(qkv.data(), x.data(), wqkv.data(), bqkv.data(), N, C,
                         3 * C);
  kernels::AttentionForward(a.data(), att.data(), qkv.data(), B, T, C, NH);
  kernels::MatmulForward(y.data(), a.data(), wo.data(), bo.data(), N, C, C);
  std::vector<float> da(N * C), dqkv(N * 3 * C), dx(N * C),
      scratch(B * NH * T * T), dwqkv(3 * C * C, 0.0f), dbqkv(3 * C, 0.0f),
      dwo(C * C, 0.0f), dbo(C, 0.0f);
  kernels::MatmulBackward(da.data(), dwo.data(), dbo.data(), dy.data(),
                          a.data(), wo.data(), N, C, C);
  kernels::AttentionBackward(dqkv.data(), scratch.data(), da.data(), qkv.data(),
                             att.data(), B, T, C, NH);
  kernels::MatmulBackward(dx.data(), dwqkv.data(), dbqkv.data(), dqkv.data(),
                          x.data(), wqkv.data(), N, C, 3 * C);

  for (int ranks = 1; ranks <= 4; ++ranks) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    OnRanks(ranks, [&](Communicator& c) {
      const DimShard heads = SplitDim(NH, c.size(), c.rank());
      const DimShard cols{heads.begin * hs, heads.size * hs, heads.valid * hs};
      const int Cl = cols.size;
      const std::vector<float> wl = ShardQkvRows(wqkv.data(), C, hs, C, heads),
                               bl = ShardQkvRows(bqkv.data(), C, hs, 1, heads),
                               wol = ShardColumns(wo.data(), C, C, cols);
      std::vector<float> qkvl(N * 3 * Cl), attl(B * heads.size * T * T),
          al(N * Cl), yl(N * C);
      ColumnParallelForward(qkvl.data(), x.data(), wl.data(), bl.data(), N, C,
                            3 * Cl);
      kernels::AttentionForward(al.data(), attl.data(), qkvl.data(), B, T, Cl,
                                heads.size);
      ASSERT_TRUE(RowParallelForward(c, yl.data(), al.data(), wol.data(),
                                     bo.data(), N, Cl, C)
                      .ok());
      ExpectNear(yl, y, "output");
      std::vector<float> dal(N * Cl), dqkvl(N * 3 * Cl), dxl(N * C),
          scratchl(B * heads.size * T * T), dwl(3 * Cl * C, 0.0f),
          dbl(3 * Cl, 0.0f), dwol(C * Cl, 0.0f), dbol(C, 0.0f);
      RowParallelBackward(dal.data(), dwol.data(), dbol.data(), dy.data(),
                          al.data(), wol.data(), N, Cl, C);
      kernels::AttentionBackward(dqkvl.data(), scratchl.data(), dal.data(),
                                 qkvl.data(), attl.data(), B, T, Cl,
                                 heads.size);
      ASSERT_TRUE(ColumnParallelBackward(c, dxl.data(), dwl.data(), dbl.data(),
                                         dqkvl.data(), x.data(), wl.data(), N,
                                         C, 3 * Cl)
                      .ok());
      ExpectNear(dxl, dx, "input gradient");
      ExpectNear(dwl, ShardQkvRows(dwqkv.data(), C, hs, C, heads),
                 "QKV weight gradient");
      ExpectNear(dbl, ShardQkvRows(dbqkv.data(), C, hs, 1, heads),
                 "QKV bias gradient");
      ExpectNear(dwol, ShardColumns(dwo.data(), C, C, cols),
                 "output projection gradient");
      ExpectNear(dbol, dbo, "output bias gradient");
    });
  }
}

TEST(TensorParallel, CrossEntropyOverASplitVocabularyMatchesTheWhole) {
  std::vector<float> logits = Fill(kN * kV, 7);
  for (float& l : logits) l *= 8;  // spread, so the max matters
  const std::vector<int32_t> targets = {0, 12, 5, 6, 12};
  std::vector<float> dlogits = logits;
  const float dloss = 1.0f / kN;
  const float want = kernels::SoftmaxCrossEntropyFused(
      dlogits.data(), targets.data(), dloss, nullptr, kN, kV);
  for (int ranks = 1; ranks <= 4; ++ranks) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    OnRanks(ranks, [&](Communicator& c) {
      const DimShard s = SplitDim(kV, c.size(), c.rank());
      std::vector<float> local = ColShard(logits, kN, kV, s);
      auto loss = ParallelCrossEntropy(c, local.data(), targets.data(), kN, kV,
                                       s, dloss);
      ASSERT_TRUE(loss.ok()) << loss.status();
      EXPECT_NEAR(*loss, want, kTol * std::fabs(want));
      ExpectNear(local, ColShard(dlogits, kN, kV, s), "logit gradient");
    });
  }
}

TEST(TensorParallel, CrossEntropyRefusesATargetOutsideTheVocabulary) {
  OnRanks(2, [](Communicator& c) {
    const DimShard s = SplitDim(kV, 2, c.rank());
    std::vector<float> local(kN * s.size, 0.0f);
    const std::vector<int32_t> targets = {0, 1, 2, 3, kV};
    auto loss =
        ParallelCrossEntropy(c, local.data(), targets.data(), kN, kV, s, 1.0f);
    EXPECT_TRUE(absl::IsInvalidArgument(loss.status())) << loss.status();
  });
}

}  // namespace
}  // namespace strata
