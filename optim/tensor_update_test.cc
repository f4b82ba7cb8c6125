#include "optim/tensor_update.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

std::vector<float> Random(uint64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = d(rng);
  return out;
}

OptimizerParams Lamb() {
  OptimizerParams p;
  p.kind = OptimizerParams::kLamb;
  p.lr = 0.01f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-6f;
  p.weight_decay = 0.01f;
  return p;
}

OptimizerParams Adafactor(float beta1) {
  OptimizerParams p;
  p.kind = OptimizerParams::kAdafactor;
  p.lr = 0;
  p.beta1 = beta1;
  p.eps = 1e-30f;
  p.weight_decay = 0.01f;
  return p;
}

// A tensor's state as its parts hold it.
struct Part {
  TensorPart part;
  uint64_t offset = 0;
  std::vector<float> w;
  std::vector<std::vector<float>> slots;
};

// Cuts a tensor of `shape` into parts of `rows_per_part` rows (a vector:
// that many elements), zero state, weights from `w`.
std::vector<Part> Cut(const OptimizerParams& p, std::vector<int64_t> shape,
                      const std::vector<float>& w, uint64_t rows_per_part) {
  const uint64_t cols = shape.size() >= 2 ? shape.back() : 1;
  std::vector<Part> parts;
  for (uint64_t off = 0; off < w.size(); off += rows_per_part * cols) {
    Part part;
    part.offset = off;
    const uint64_t n = std::min<uint64_t>(rows_per_part * cols, w.size() - off);
    part.part = PartOfTensor(p, n, shape, /*alone=*/false);
    part.w.assign(w.begin() + off, w.begin() + off + n);
    for (uint64_t size : StateSizes(p, part.part)) {
      part.slots.emplace_back(size, 0.0f);
    }
    EXPECT_TRUE(CheckTensorPart(p, off, n, shape).ok());
    parts.push_back(std::move(part));
  }
  return parts;
}

// One step of every part: partials added over the parts in order.
void Step(const OptimizerParams& p, int64_t t, std::vector<Part>& parts,
          const std::vector<float>& g) {
  const int n = NumReductions(p, parts[0].part);
  std::vector<std::vector<double>> totals;
  for (int k = 0; k < n; ++k) {
    std::vector<double> sum;
    for (Part& part : parts) {
      const std::vector<double> partial =
          PartialSums({&p, p.lr, t, part.part}, k, part.w.data(), part.slots,
                      g.data() + part.offset, totals);
      if (sum.empty()) sum.assign(partial.size(), 0.0);
      ASSERT_EQ(partial.size(), sum.size());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += partial[i];
    }
    totals.push_back(sum);
  }
  for (Part& part : parts) {
    ApplyTensorUpdate({&p, p.lr, t, part.part}, part.w.data(),
                      absl::MakeSpan(part.slots), g.data() + part.offset,
                      totals);
  }
}

std::vector<float> Joined(const std::vector<Part>& parts) {
  std::vector<float> w;
  for (const Part& part : parts)
    w.insert(w.end(), part.w.begin(), part.w.end());
  return w;
}

// Steps a tensor cut into parts and the same tensor whole, and checks they
// stay within `tol` of each other (only the order of double sums differs).
void ExpectCutEqualsWhole(const OptimizerParams& p, std::vector<int64_t> shape,
                          uint64_t rows_per_part) {
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const std::vector<float> w0 = Random(numel, 1, 0.5f);
  std::vector<Part> cut = Cut(p, shape, w0, rows_per_part);
  ASSERT_GT(cut.size(), 2u);
  std::vector<Part> whole = Cut(p, shape, w0, numel);
  ASSERT_EQ(whole.size(), 1u);
  for (int64_t t = 1; t <= 10; ++t) {
    const std::vector<float> g = Random(numel, 100 + t, 0.1f);
    Step(p, t, cut, g);
    for (Part& part : whole) {
      ApplyWholeTensorUpdate({&p, p.lr, t, part.part}, part.w.data(),
                             absl::MakeSpan(part.slots), g.data());
    }
  }
  const std::vector<float> a = Joined(cut), b = whole[0].w;
  float biggest = 0, moved = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    biggest = std::max(biggest, std::fabs(b[i] - a[i]));
    moved = std::max(moved, std::fabs(b[i] - w0[i]));
  }
  EXPECT_GT(moved, 1e-3f);  // the steps did something
  EXPECT_LE(biggest, 1e-6f);
}

TEST(TensorUpdate, LambCutIntoPartsEqualsTheWholeTensor) {
  ExpectCutEqualsWhole(Lamb(), {12, 7}, 5);
}

TEST(TensorUpdate, AdafactorMatrixCutAtRowsEqualsTheWholeTensor) {
  ExpectCutEqualsWhole(Adafactor(0.0f), {12, 7}, 5);
  ExpectCutEqualsWhole(Adafactor(0.9f), {3, 4, 5}, 4);
}

TEST(TensorUpdate, AdafactorVectorCutEqualsTheWholeTensor) {
  ExpectCutEqualsWhole(Adafactor(0.0f), {50}, 16);
}

TEST(TensorUpdate, LambTrustRatioScalesAdamsDirection) {
  // One step from zero state: u = g/(|g| + eps) (bias-corrected) + wd*w.
  OptimizerParams p = Lamb();
  std::vector<Part> parts = Cut(p, {4}, {3, 4, 0, 0}, 4);
  const std::vector<float> g = {1, -2, 0.5f, 0};
  Step(p, 1, parts, g);
  double u[4], u2 = 0;
  const float w0[4] = {3, 4, 0, 0};
  for (int i = 0; i < 4; ++i) {
    const double d = g[i] == 0 ? 0 : (g[i] > 0 ? 1 : -1);
    u[i] = d * std::fabs(g[i]) / (std::fabs(g[i]) + 1e-6) + 0.01 * w0[i];
    u2 += u[i] * u[i];
  }
  const double trust = 5.0 / std::sqrt(u2);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(parts[0].w[i], w0[i] - 0.01 * trust * u[i], 1e-6) << i;
  }
  // The ratio is capped by max_trust_ratio.
  p.max_trust_ratio = 1.0f;
  std::vector<Part> capped = Cut(p, {4}, {3, 4, 0, 0}, 4);
  Step(p, 1, capped, g);
  EXPECT_NEAR(capped[0].w[0], 3 - 0.01 * u[0], 1e-6);
}

// 1-bit LAMB's frozen variance (--compress onebit
// --compress_freeze_variance): after update 3, v and its bias correction
// stay as update 3 left them while m, the trust ratio (over the whole
// tensor, cut in parts) and the weights go on. Checked against LAMB
// written here in double.
TEST(TensorUpdate, LambWithAFrozenVarianceMatchesReference) {
  OptimizerParams p = Lamb();
  p.freeze_variance_after = 3;
  const std::vector<int64_t> shape = {6, 5};
  const std::vector<float> w0 = Random(30, 3, 0.5f);
  std::vector<Part> parts = Cut(p, shape, w0, 2);
  ASSERT_EQ(parts.size(), 3u);
  std::vector<double> w(w0.begin(), w0.end()), m(30, 0), v(30, 0);
  std::vector<float> v_at_freeze;
  for (int64_t t = 1; t <= 8; ++t) {
    const std::vector<float> g = Random(30, 200 + t, 0.1f);
    Step(p, t, parts, g);
    const int64_t t_v = std::min<int64_t>(t, 3);
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t_v);
    std::vector<double> u(30);
    double w2 = 0, u2 = 0;
    for (int i = 0; i < 30; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      if (t <= 3) v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      u[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + 1e-6) + 0.01 * w[i];
      w2 += w[i] * w[i];
      u2 += u[i] * u[i];
    }
    const double trust = std::sqrt(w2) / std::sqrt(u2);
    for (int i = 0; i < 30; ++i) w[i] -= 0.01 * trust * u[i];
    std::vector<float> v_now;
    for (const Part& part : parts) {
      v_now.insert(v_now.end(), part.slots[1].begin(), part.slots[1].end());
    }
    if (t == 3) v_at_freeze = v_now;
    if (t > 3) {
      EXPECT_EQ(v_now, v_at_freeze) << "update " << t;
    }
    const std::vector<float> got = Joined(parts);
    for (int i = 0; i < 30; ++i) {
      ASSERT_NEAR(got[i], w[i], 1e-6) << "update " << t << " element " << i;
    }
  }
  // The frozen updates still moved the weights.
  EXPECT_GT(std::fabs(Joined(parts)[0] - w0[0]), 1e-3f);
}

TEST(TensorUpdate, AdafactorStateIsRowsPlusColumns) {
  const OptimizerParams p = Adafactor(0.0f);
  const TensorPart part = PartOfTensor(p, 30 * 40, {60, 40}, false);
  EXPECT_EQ(StateSizes(p, part), (std::vector<uint64_t>{30, 40}));
  EXPECT_EQ(NumReductions(p, part), 2);
  const TensorPart vec = PartOfTensor(p, 40, {40}, false);
  EXPECT_EQ(StateSizes(p, vec), (std::vector<uint64_t>{40}));
  EXPECT_EQ(NumReductions(p, vec), 1);
  EXPECT_EQ(StateSizes(Adafactor(0.9f), part),
            (std::vector<uint64_t>{30, 40, 1200}));
}

TEST(TensorUpdate, AFactoredChunkMustHoldWholeRows) {
  const OptimizerParams p = Adafactor(0.0f);
  EXPECT_TRUE(CheckTensorPart(p, 80, 40, {60, 40}).ok());
  const absl::Status s = CheckTensorPart(p, 80, 30, {60, 40});
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("whole rows"), std::string::npos);
  EXPECT_TRUE(CheckTensorPart(Lamb(), 3, 5, {60, 40}).ok());
}

TEST(TensorUpdate, AdafactorClipsTheUpdatesRms) {
  // With relative_step off and no parameter scaling, the first step of a
  // vector is lr * g/sqrt((1-beta2_1) g^2) clipped to RMS 1: beta2_1 = 0, so
  // U = sign(g), already of RMS 1, and w moves by exactly lr.
  OptimizerParams p = Adafactor(0.0f);
  p.relative_step = false;
  p.scale_parameter = false;
  p.weight_decay = 0;
  p.lr = 0.5f;
  std::vector<Part> parts = Cut(p, {3}, {1, 1, 1}, 3);
  Step(p, 1, parts, {2, -3, 4});
  EXPECT_FLOAT_EQ(parts[0].w[0], 0.5f);
  EXPECT_FLOAT_EQ(parts[0].w[1], 1.5f);
  EXPECT_FLOAT_EQ(parts[0].w[2], 0.5f);
  // A clip threshold of 0.5 halves it.
  p.clip_threshold = 0.5f;
  std::vector<Part> clipped = Cut(p, {3}, {1, 1, 1}, 3);
  Step(p, 1, clipped, {2, -3, 4});
  EXPECT_FLOAT_EQ(clipped[0].w[0], 0.75f);
}

}  // namespace
}  // namespace strata
