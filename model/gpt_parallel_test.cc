// ParallelGpt (tensor and pipeline parallelism on CPU threads) against the
// unsplit Gpt: the same loss and gradients within 1e-5 for tensor splits
// of 1-4 ranks, pipelines of 1-3 stages, both at once, and 1-5
// micro-batches, on a model whose vocabulary (13) and head count (3) the
// tensor ranks do not divide and whose layers (3) the stages do not.
#include "model/gpt_parallel.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/gpt.h"
#include "testing/model_test_util.h"

namespace strata {
namespace {

constexpr int kB = 5, kT = 7;
constexpr float kTol = 1e-5f;

GptConfig OddConfig() {
  GptConfig c;
  c.vocab = 13;
  c.context = 8;
  c.layers = 3;
  c.heads = 3;
  c.width = 12;
  return c;
}

std::vector<int32_t> Tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// Weights larger than GPT-2's init (N(0, 0.3), LayerNorm weights near 1), so
// attention is far from uniform and every gradient is well away from zero.
void FillWeights(Model& m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.3f);
  for (size_t i = 0; i < m.params().size(); ++i) {
    const bool ones = m.params()[i].init == ParamInfo::kOnes;
    float* w = m.param_data(static_cast<int>(i));
    for (size_t j = 0; j < m.params()[i].spec.numel(); ++j) {
      w[j] = (ones ? 1.0f : 0.0f) + dist(rng);
    }
  }
}

void CopyWeights(Model& from, Model& to) {
  for (size_t i = 0; i < from.params().size(); ++i) {
    std::copy_n(from.param_data(static_cast<int>(i)),
                from.params()[i].spec.numel(),
                to.param_data(static_cast<int>(i)));
  }
}

// Every gradient of `got` within kTol of `want`'s, relative to the largest
// entry of its tensor when that is above 1.
void ExpectSameGrads(Model& got, Model& want) {
  for (size_t i = 0; i < want.params().size(); ++i) {
    const int p = static_cast<int>(i);
    const size_t n = want.params()[i].spec.numel();
    float scale = 1.0f;
    for (size_t j = 0; j < n; ++j) {
      scale = std::max(scale, std::fabs(want.grad_data(p)[j]));
    }
    float worst = 0;
    for (size_t j = 0; j < n; ++j) {
      worst = std::max(worst,
                       std::fabs(got.grad_data(p)[j] - want.grad_data(p)[j]));
    }
    EXPECT_LE(worst, kTol * scale) << want.params()[i].spec.name;
  }
}

std::unique_ptr<Model> MakeParallel(const GptConfig& config,
                                    ModelParallelism par) {
  auto m = ParallelGpt::Create(config, par);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

struct Split {
  int tp, pp, micro_batches;
};

void PrintTo(const Split& s, std::ostream* os) {
  *os << "tp " << s.tp << ", pp " << s.pp << ", " << s.micro_batches
      << " micro-batches";
}

class ParallelGptSplits : public ::testing::TestWithParam<Split> {};

TEST_P(ParallelGptSplits, LossAndGradientsMatchTheUnsplitModel) {
  const Split split = GetParam();
  const GptConfig config = OddConfig();
  auto whole = Gpt::Create(config);
  ASSERT_TRUE(whole.ok());
  FillWeights(**whole, 3);
  std::unique_ptr<Model> parallel =
      MakeParallel(config, {split.tp, split.pp, split.micro_batches});
  ASSERT_NE(parallel, nullptr);
  CopyWeights(**whole, *parallel);
  // Two batches: the second call reuses the ranks' buffers.
  for (uint32_t seed : {1u, 2u}) {
    const std::vector<int32_t> x = Tokens(kB * kT, config.vocab, seed);
    const std::vector<int32_t> y = Tokens(kB * kT, config.vocab, seed + 100);
    auto want = (*whole)->ForwardBackward(x.data(), y.data(), kB, kT);
    auto got = parallel->ForwardBackward(x.data(), y.data(), kB, kT);
    ASSERT_TRUE(want.ok() && got.ok()) << got.status();
    EXPECT_NEAR(*got, *want, kTol * *want);
    ExpectSameGrads(*parallel, **whole);
  }
}

INSTANTIATE_TEST_SUITE_P(TensorPipelineAndBoth, ParallelGptSplits,
                         ::testing::Values(Split{1, 1, 1}, Split{2, 1, 1},
                                           Split{3, 1, 1}, Split{4, 1, 1},
                                           Split{1, 2, 1}, Split{1, 2, 3},
                                           Split{1, 3, 4}, Split{2, 2, 1},
                                           Split{2, 2, 2}, Split{2, 2, 5},
                                           Split{3, 3, 2}, Split{1, 1, 3}),
                         [](const ::testing::TestParamInfo<Split>& info) {
                           return "tp" + std::to_string(info.param.tp) + "_pp" +
                                  std::to_string(info.param.pp) + "_m" +
                                  std::to_string(info.param.micro_batches);
                         });

TEST(ParallelGpt, RecomputationGivesTheSameGradients) {
  GptConfig config = OddConfig();
  config.recompute = true;
  auto whole = Gpt::Create(OddConfig());
  ASSERT_TRUE(whole.ok());
  FillWeights(**whole, 4);
  std::unique_ptr<Model> parallel = MakeParallel(config, {2, 2, 2});
  ASSERT_NE(parallel, nullptr);
  CopyWeights(**whole, *parallel);
  const std::vector<int32_t> x = Tokens(kB * kT, config.vocab, 5);
  const std::vector<int32_t> y = Tokens(kB * kT, config.vocab, 6);
  auto want = (*whole)->ForwardBackward(x.data(), y.data(), kB, kT);
  auto got = parallel->ForwardBackward(x.data(), y.data(), kB, kT);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status();
  EXPECT_NEAR(*got, *want, kTol * *want);
  ExpectSameGrads(*parallel, **whole);
}

TEST(ParallelGpt, AccumulatesLikeTheUnsplitModelAndEvaluatesTheSameLoss) {
  const GptConfig config = OddConfig();
  auto whole = Gpt::Create(config);
  ASSERT_TRUE(whole.ok());
  FillWeights(**whole, 7);
  std::unique_ptr<Model> parallel = MakeParallel(config, {2, 3, 2});
  ASSERT_NE(parallel, nullptr);
  CopyWeights(**whole, *parallel);
  const std::vector<int32_t> a = Tokens(kB * kT, config.vocab, 8);
  const std::vector<int32_t> b = Tokens(3 * 4, config.vocab, 9);
  for (bool accumulate : {false, true}) {
    const std::vector<int32_t>& x = accumulate ? b : a;
    const int B = accumulate ? 3 : kB, T = accumulate ? 4 : kT;
    ASSERT_TRUE(
        (*whole)->ForwardBackward(x.data(), x.data(), B, T, accumulate).ok());
    ASSERT_TRUE(
        parallel->ForwardBackward(x.data(), x.data(), B, T, accumulate).ok());
  }
  ExpectSameGrads(*parallel, **whole);
  auto want = (*whole)->Loss(a.data(), b.data(), 2, 6);
  auto got = parallel->Loss(a.data(), b.data(), 2, 6);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(*got, *want);
}

// The trainer's pulls land while the model waits: every parameter before
// the ranks get their shards.
TEST(ParallelGpt, ReadsNoParameterBeforeItsWaitReturns) {
  const GptConfig config = OddConfig();
  std::unique_ptr<Model> parallel = MakeParallel(config, {2, 2, 2});
  ASSERT_NE(parallel, nullptr);
  FillWeights(*parallel, 3);
  const std::vector<int32_t> x = Tokens(kB * kT, config.vocab, 1);
  const std::vector<int32_t> y = Tokens(kB * kT, config.vocab, 2);
  testing::ExpectWaitsBeforeEachParameterIsRead(*parallel, x.data(), y.data(),
                                                kB, kT);
}

TEST(ParallelGpt, ReportsEveryGradientOnceInTheUnsplitOrder) {
  const GptConfig config = OddConfig();
  auto whole = Gpt::Create(config);
  ASSERT_TRUE(whole.ok());
  std::unique_ptr<Model> parallel = MakeParallel(config, {2, 2, 2});
  ASSERT_NE(parallel, nullptr);
  std::vector<int> want, got;
  (*whole)->SetGradReadyCallback([&](int i) { want.push_back(i); });
  parallel->SetGradReadyCallback([&](int i) { got.push_back(i); });
  const std::vector<int32_t> x = Tokens(kB * kT, config.vocab, 1);
  ASSERT_TRUE((*whole)->ForwardBackward(x.data(), x.data(), kB, kT).ok());
  ASSERT_TRUE(parallel->ForwardBackward(x.data(), x.data(), kB, kT).ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(got.size(), (*whole)->params().size());
}

TEST(ParallelGpt, RefusesBadSplitsAndBadBatches) {
  const GptConfig config = OddConfig();
  EXPECT_TRUE(
      absl::IsInvalidArgument(ParallelGpt::Create(config, {0, 1, 1}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ParallelGpt::Create(config, {1, 4, 1}).status()));  // 3 layers
  EXPECT_TRUE(
      absl::IsInvalidArgument(ParallelGpt::Create(config, {1, 1, 0}).status()));
  EXPECT_TRUE(absl::IsUnimplemented(
      CreateModel(config, Device::kCuda, {2, 1, 1}).status()));
  auto plain = CreateModel(config, Device::kCpu, {1, 1, 4});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(dynamic_cast<ParallelGpt*>(plain->get()), nullptr);

  std::unique_ptr<Model> parallel = MakeParallel(config, {2, 2, 1});
  ASSERT_NE(parallel, nullptr);
  std::vector<int32_t> x = Tokens(kB * kT, config.vocab, 1);
  x[3] = config.vocab;  // outside the vocabulary
  EXPECT_TRUE(absl::IsInvalidArgument(
      parallel->ForwardBackward(x.data(), x.data(), kB, kT).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      parallel->ForwardBackward(x.data(), x.data(), kB, 9).status()));
  x[3] = 0;  // and it still trains
  auto loss = parallel->ForwardBackward(x.data(), x.data(), kB, kT);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_GT(*loss, 0);
}

}  // namespace
}  // namespace strata
