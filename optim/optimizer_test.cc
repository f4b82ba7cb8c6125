#include "optim/optimizer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "common/parallel.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

// A straightforward double-precision reference of ApplyUpdate.
struct RefState {
  std::vector<double> w, m, v;
};

void RefStep(const OptimizerParams& p, double lr, int64_t t, RefState& s,
             const std::vector<float>& g) {
  const double b1 = p.beta1, b2 = p.beta2, wd = p.weight_decay;
  for (size_t i = 0; i < s.w.size(); ++i) {
    double gi = g[i];
    if (p.kind == OptimizerParams::kSgd) {
      gi += wd * s.w[i];
      if (p.momentum > 0) {
        s.m[i] = p.momentum * s.m[i] + gi;
        gi = s.m[i];
      }
      s.w[i] -= lr * gi;
      continue;
    }
    if (p.kind == OptimizerParams::kAdam) gi += wd * s.w[i];
    if (p.kind == OptimizerParams::kAdamW) s.w[i] -= lr * wd * s.w[i];
    s.m[i] = b1 * s.m[i] + (1 - b1) * gi;
    // Frozen (1-bit Adam): v and its bias correction as update
    // freeze_variance_after left them.
    const bool frozen =
        p.freeze_variance_after > 0 && t > p.freeze_variance_after;
    if (!frozen) s.v[i] = b2 * s.v[i] + (1 - b2) * gi * gi;
    const double t_v = frozen ? p.freeze_variance_after : t;
    const double m_hat = s.m[i] / (1 - std::pow(b1, t));
    const double v_hat = s.v[i] / (1 - std::pow(b2, t_v));
    s.w[i] -= lr * m_hat / (std::sqrt(v_hat) + p.eps);
  }
}

std::vector<float> RandomVector(std::mt19937& rng, size_t n, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Runs 12 updates of `p` (warm-up 3, cosine to step 9, then constant) on
// float state and on the double reference, comparing after every update.
void ExpectMatchesReference(const OptimizerParams& p) {
  constexpr size_t kN = 1037;  // not a multiple of any vector width
  std::mt19937 rng(42);
  std::vector<float> w = RandomVector(rng, kN, 1.0f);
  std::vector<float> m(kN, 0.0f), v(kN, 0.0f);
  RefState ref{std::vector<double>(w.begin(), w.end()),
               std::vector<double>(kN, 0.0), std::vector<double>(kN, 0.0)};
  for (int64_t step = 0; step < 12; ++step) {
    const std::vector<float> g = RandomVector(rng, kN, 0.5f);
    const float lr = ScheduledLr(p, step);
    ApplyUpdate(p, lr, step + 1, w.data(), m.data(), v.data(), g.data(), kN);
    RefStep(p, lr, step + 1, ref, g);
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(w[i], ref.w[i], 1e-6 + 1e-5 * std::abs(ref.w[i]))
          << "step " << step << " element " << i;
      if (NumStateSlots(p) > 0) {
        ASSERT_NEAR(m[i], ref.m[i], 1e-6 + 1e-5 * std::abs(ref.m[i]));
      }
      if (NumStateSlots(p) > 1) {
        ASSERT_NEAR(v[i], ref.v[i], 1e-7 + 1e-5 * std::abs(ref.v[i]));
      }
    }
  }
}

OptimizerParams Scheduled(OptimizerParams::Kind kind) {
  OptimizerParams p;
  p.kind = kind;
  p.lr = 0.01f;
  p.weight_decay = 0.1f;
  p.warmup_steps = 3;
  p.total_steps = 9;
  p.min_lr_ratio = 0.1f;
  return p;
}

TEST(Optimizer, SgdMatchesReference) {
  ExpectMatchesReference(Scheduled(OptimizerParams::kSgd));
}

TEST(Optimizer, SgdWithMomentumMatchesReference) {
  OptimizerParams p = Scheduled(OptimizerParams::kSgd);
  p.momentum = 0.9f;
  ExpectMatchesReference(p);
}

TEST(Optimizer, AdamMatchesReference) {
  ExpectMatchesReference(Scheduled(OptimizerParams::kAdam));
}

TEST(Optimizer, AdamWMatchesReference) {
  ExpectMatchesReference(Scheduled(OptimizerParams::kAdamW));
}

// --compress onebit --compress_freeze_variance: from update 5 on, v and
// its bias correction stay as update 4 left them (the reference checks v
// itself after every update), while m and the weights go on.
TEST(Optimizer, AdamWithAFrozenVarianceMatchesReference) {
  OptimizerParams p = Scheduled(OptimizerParams::kAdamW);
  p.freeze_variance_after = 4;
  ExpectMatchesReference(p);
  p.kind = OptimizerParams::kAdam;
  ExpectMatchesReference(p);
}

TEST(Optimizer, AdamFirstStepIsBiasCorrected) {
  // At t = 1 from zero state, m_hat = g and v_hat = g^2, so each weight
  // moves by lr * g / (|g| + eps): almost exactly lr against the gradient.
  OptimizerParams p;
  p.kind = OptimizerParams::kAdam;
  std::vector<float> w = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<float> g = {0.5f, -2.0f, 1e-3f, -7.0f};
  std::vector<float> m(4, 0.0f), v(4, 0.0f);
  ApplyUpdate(p, 0.1f, 1, w.data(), m.data(), v.data(), g.data(), 4);
  for (int i = 0; i < 4; ++i) {
    const double expected = 1.0 - 0.1 * g[i] / (std::abs(g[i]) + 1e-8);
    EXPECT_NEAR(w[i], expected, 1e-6) << i;
  }
}

// MakeAdamStep's constants, put through the formula in adam_step.h (as the
// CUDA kernel does), give ApplyUpdate's results for Adam and AdamW.
TEST(Optimizer, AdamStepConstantsReproduceApplyUpdate) {
  for (auto kind : {OptimizerParams::kAdam, OptimizerParams::kAdamW}) {
    OptimizerParams p;
    p.kind = kind;
    p.lr = 3e-3f;
    p.weight_decay = 0.1f;
    std::mt19937 rng(5);
    std::normal_distribution<float> dist;
    const int n = 257;
    std::vector<float> w(n), m(n, 0.0f), v(n, 0.0f);
    for (float& x : w) x = dist(rng);
    std::vector<float> w2 = w, m2 = m, v2 = v;
    for (int64_t t = 1; t <= 4; ++t) {
      std::vector<float> g(n);
      for (float& x : g) x = dist(rng);
      const float lr = ScheduledLr(p, t - 1);
      ApplyUpdate(p, lr, t, w.data(), m.data(), v.data(), g.data(), n);
      const AdamStep s = MakeAdamStep(p, lr, t);
      for (int i = 0; i < n; ++i) {
        const float gi = g[i] + s.l2 * w2[i];
        m2[i] = s.b1 * m2[i] + s.one_minus_b1 * gi;
        v2[i] = s.b2 * v2[i] + s.one_minus_b2 * (gi * gi);
        w2[i] =
            w2[i] * s.decay -
            (s.step_size * m2[i]) / (std::sqrt(v2[i]) * s.inv_sqrt_bc2 + s.eps);
      }
    }
    for (int i = 0; i < n; ++i) {
      // Only FMA contraction may differ (this file may be compiled with it).
      ASSERT_NEAR(w2[i], w[i], 1e-6 * (1 + std::abs(w[i]))) << kind << " " << i;
      ASSERT_NEAR(m2[i], m[i], 1e-6 * (1 + std::abs(m[i])));
      ASSERT_NEAR(v2[i], v[i], 1e-6 * (1 + std::abs(v[i])));
    }
  }
}

TEST(Optimizer, ScheduleWarmsUpThenDecaysByCosine) {
  OptimizerParams p;
  p.lr = 1.0f;
  p.warmup_steps = 4;
  p.total_steps = 12;
  p.min_lr_ratio = 0.1f;
  EXPECT_FLOAT_EQ(ScheduledLr(p, 0), 0.25f);  // first warm-up update
  EXPECT_FLOAT_EQ(ScheduledLr(p, 1), 0.5f);
  EXPECT_FLOAT_EQ(ScheduledLr(p, 3), 1.0f);   // last warm-up update
  EXPECT_FLOAT_EQ(ScheduledLr(p, 4), 1.0f);   // cosine starts at the peak
  EXPECT_FLOAT_EQ(ScheduledLr(p, 8), 0.55f);  // half way: (1 + 0.1) / 2
  EXPECT_NEAR(ScheduledLr(p, 6), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)),
              1e-6);
  EXPECT_FLOAT_EQ(ScheduledLr(p, 12), 0.1f);
  EXPECT_FLOAT_EQ(ScheduledLr(p, 1000), 0.1f);
}

TEST(Optimizer, ScheduleWithoutTotalStepsIsConstantAfterWarmUp) {
  OptimizerParams p;
  p.lr = 0.5f;
  EXPECT_FLOAT_EQ(ScheduledLr(p, 0), 0.5f);
  p.warmup_steps = 2;
  EXPECT_FLOAT_EQ(ScheduledLr(p, 0), 0.25f);
  EXPECT_FLOAT_EQ(ScheduledLr(p, 2), 0.5f);
  EXPECT_FLOAT_EQ(ScheduledLr(p, 1 << 30), 0.5f);
}

TEST(Optimizer, AllWithinFindsAValueBeyondTheLimitAnywhere) {
  constexpr size_t kN = 40000;
  std::vector<float> g(kN, -kMaxGradientMagnitude);
  EXPECT_TRUE(AllWithin(g.data(), kN, kMaxGradientMagnitude));
  for (float x : {2e19f, -3e38f, std::numeric_limits<float>::quiet_NaN()}) {
    for (size_t pos : {size_t{0}, size_t{16384}, kN - 1}) {
      std::vector<float> h = g;
      h[pos] = x;
      EXPECT_FALSE(AllWithin(h.data(), kN, kMaxGradientMagnitude))
          << x << " at " << pos;
    }
  }
}

// At the bound, Adam's state and the weight stay finite.
TEST(Optimizer, AdamStaysFiniteAtTheLargestGradientAServerApplies) {
  OptimizerParams p;
  p.kind = OptimizerParams::kAdam;
  p.lr = 1e-3f;
  std::vector<float> w(4, 0.5f), m(4, 0.0f), v(4, 0.0f);
  std::vector<float> g = {kMaxGradientMagnitude, -kMaxGradientMagnitude,
                          kMaxGradientMagnitude, 1.0f};
  for (int64_t t = 1; t <= 100; ++t) {
    ApplyUpdate(p, p.lr, t, w.data(), m.data(), v.data(), g.data(), 4);
  }
  EXPECT_TRUE(AllFinite(v.data(), 4));
  EXPECT_TRUE(AllFinite(m.data(), 4));
  EXPECT_TRUE(AllFinite(w.data(), 4));
  // An ordinary gradient still moves it afterwards.
  const float before = w[0];  // the element whose v is near 1e38
  std::vector<float> ordinary = {1.0f, 1.0f, 1.0f, 1.0f};
  ApplyUpdate(p, p.lr, 101, w.data(), m.data(), v.data(), ordinary.data(), 4);
  EXPECT_NE(w[0], before);
}

TEST(Optimizer, AllFiniteFindsNaNAndInfinityAnywhere) {
  constexpr size_t kN = 40000;  // spans several scan blocks
  std::vector<float> g(kN, 1.0f);
  g[7] = std::numeric_limits<float>::max();
  g[8] = std::numeric_limits<float>::denorm_min();
  g[9] = -0.0f;
  EXPECT_TRUE(AllFinite(g.data(), kN));
  EXPECT_TRUE(AllFinite(g.data(), 0));
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       -std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (float x : bad) {
    for (size_t pos : {size_t{0}, size_t{17}, size_t{16384}, kN - 1}) {
      std::vector<float> h = g;
      h[pos] = x;
      EXPECT_FALSE(AllFinite(h.data(), kN)) << x << " at " << pos;
      EXPECT_TRUE(AllFinite(h.data(), pos));  // just before it
    }
  }
}

TEST(Optimizer, ConfigDefaultsAreFilledIn) {
  v1::OptimizerConfig c;
  c.set_kind(v1::OptimizerConfig::ADAM);
  c.set_lr(0.01f);
  absl::StatusOr<OptimizerParams> p = OptimizerParamsFromProto(c);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->kind, OptimizerParams::kAdam);
  EXPECT_FLOAT_EQ(p->lr, 0.01f);
  EXPECT_FLOAT_EQ(p->beta1, 0.9f);
  EXPECT_FLOAT_EQ(p->beta2, 0.999f);
  EXPECT_FLOAT_EQ(p->eps, 1e-8f);
  EXPECT_EQ(NumStateSlots(*p), 2);
  c.set_kind(v1::OptimizerConfig::SGD);
  EXPECT_EQ(NumStateSlots(*OptimizerParamsFromProto(c)), 0);
  c.set_momentum(0.9f);
  EXPECT_EQ(NumStateSlots(*OptimizerParamsFromProto(c)), 1);
}

TEST(Optimizer, BadConfigIsRejected) {
  const auto bad = [](auto mutate) {
    v1::OptimizerConfig c;
    c.set_kind(v1::OptimizerConfig::ADAMW);
    c.set_lr(0.01f);
    mutate(c);
    return OptimizerParamsFromProto(c).status().code();
  };
  using C = v1::OptimizerConfig;
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(bad([](C& c) { c.set_lr(-1); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_lr(NAN); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_lr(INFINITY); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_beta1(1.0f); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_beta1(-0.5f); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_beta2(1.5f); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_eps(-1e-8f); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_momentum(1.0f); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_weight_decay(-0.1f); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_warmup_steps(-1); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_total_steps(-1); }), kInvalid);
  EXPECT_EQ(bad([](C& c) {
              c.set_warmup_steps(10);
              c.set_total_steps(10);
            }),
            kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_min_lr_ratio(2); }), kInvalid);
  EXPECT_EQ(bad([](C& c) { c.set_kind(static_cast<C::Kind>(7)); }), kInvalid);
  EXPECT_EQ(bad([](C& c) {}), absl::StatusCode::kOk);
  OptimizerParams p;  // built directly: no defaults are filled in
  EXPECT_TRUE(ValidateOptimizerParams(p).ok());
  p.eps = 0;
  EXPECT_EQ(ValidateOptimizerParams(p).code(), kInvalid);
}

// Runs `p` serially and in parallel; the results must be bit-identical.
void ExpectParallelMatchesSerial(const OptimizerParams& p, size_t n,
                                 uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> w0 = RandomVector(rng, n, 1.0f);
  const std::vector<float> g = RandomVector(rng, n, 1.0f);
  std::vector<float> w1 = w0, m1(n, 0.1f), v1(n, 0.2f);
  std::vector<float> w2 = w0, m2(n, 0.1f), v2(n, 0.2f);
  ApplyUpdate(p, 0.01f, 3, w1.data(), m1.data(), v1.data(), g.data(), n);
  ApplyUpdateParallel(p, 0.01f, 3, w2.data(), m2.data(), v2.data(), g.data(),
                      n);
  EXPECT_EQ(std::memcmp(w1.data(), w2.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(m1.data(), m2.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(v1.data(), v2.data(), n * sizeof(float)), 0);
}

TEST(Optimizer, ParallelUpdateIsBitIdenticalToSerial) {
  const OptimizerParams p = Scheduled(OptimizerParams::kAdamW);
  const int saved = NumThreads();
  for (int threads : {1, 2, 4, 8}) {
    SetNumThreads(threads);
    for (size_t n : {size_t{0}, size_t{100}, size_t{5 * 16384 + 123}}) {
      ExpectParallelMatchesSerial(p, n, 7);
    }
  }
  SetNumThreads(saved);
}

TEST(Optimizer, ParallelUpdateServesConcurrentCallers) {
  const OptimizerParams p = Scheduled(OptimizerParams::kAdam);
  std::vector<std::thread> callers;
  for (uint32_t i = 0; i < 6; ++i) {
    callers.emplace_back([&p, i] {
      for (int rep = 0; rep < 5; ++rep) {
        ExpectParallelMatchesSerial(p, 3 * 16384 + i, i);
      }
    });
  }
  for (std::thread& t : callers) t.join();
}

// ApplyUpdateFormed against forming the whole gradient first: bit for
// bit, for every optimizer, with the blocks covering [0, n) in order.
TEST(Optimizer, UpdateWithAFormedGradientIsBitIdenticalToOneFormedFirst) {
  OptimizerParams momentum = Scheduled(OptimizerParams::kSgd);
  momentum.momentum = 0.9f;
  for (const OptimizerParams& p : {Scheduled(OptimizerParams::kSgd), momentum,
                                   Scheduled(OptimizerParams::kAdam),
                                   Scheduled(OptimizerParams::kAdamW)}) {
    for (size_t n : {size_t{0}, size_t{100}, size_t{3 * 16384 + 77}}) {
      std::mt19937 rng(static_cast<uint32_t>(n) + 3);
      const std::vector<float> w0 = RandomVector(rng, n, 1.0f);
      const std::vector<float> a = RandomVector(rng, n, 1.0f);
      const std::vector<float> b = RandomVector(rng, n, 1.0f);
      // A two-term clipped mean, as a server forms a BSP step's.
      std::vector<float> g(n);
      for (size_t i = 0; i < n; ++i) {
        g[i] = 0.0f + 0.25f * (a[i] * 0.5f);
        g[i] += 0.75f * (b[i] * 0.5f);
      }
      std::vector<float> w1 = w0, m1(n, 0.1f), v1(n, 0.2f);
      std::vector<float> w2 = w0, m2(n, 0.1f), v2(n, 0.2f);
      ApplyUpdate(p, 0.01f, 3, w1.data(), m1.data(), v1.data(), g.data(), n);
      size_t next = 0;
      ApplyUpdateFormed(p, 0.01f, 3, w2.data(), m2.data(), v2.data(), n,
                        [&](size_t begin, size_t end, float* out) {
                          EXPECT_EQ(begin, next);
                          EXPECT_LT(begin, end);
                          next = end;
                          for (size_t i = begin; i < end; ++i) {
                            float x = 0.0f + 0.25f * (a[i] * 0.5f);
                            x += 0.75f * (b[i] * 0.5f);
                            out[i - begin] = x;
                          }
                        });
      EXPECT_EQ(next, n);
      EXPECT_EQ(std::memcmp(w1.data(), w2.data(), n * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(m1.data(), m2.data(), n * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(v1.data(), v2.data(), n * sizeof(float)), 0);
      if (n > 0) {
        EXPECT_NE(w1, w0);  // the update did something
      }
    }
  }
}

}  // namespace
}  // namespace strata
