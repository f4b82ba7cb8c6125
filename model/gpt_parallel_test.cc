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

// Every gradient reported once, in the unsplit model's order.
void ExpectGradientsReportedAsTheUnsplitModel(const GptConfig& config) {
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

// The odd model with its middle block a mixture of 4 experts, top-2 (the
// router and experts whole on every tensor rank of its stage).
GptConfig MoeConfig(float capacity, float aux_loss) {
  GptConfig c = OddConfig();
  c.experts = 4;
  c.top_k = 2;
  c.moe_every = 2;
  c.expert_hidden = 20;
  c.capacity = capacity;
  c.aux_loss = aux_loss;
  return c;
}

// With room for every token and no aux loss, a token's output depends on
// it alone: every split and any micro-batches match the unsplit model.
class ParallelGptMoe : public ::testing::TestWithParam<Split> {};

TEST_P(ParallelGptMoe, MatchesTheUnsplitModel) {
  const Split split = GetParam();
  for (const bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "stored");
    GptConfig config = MoeConfig(/*capacity=*/8, /*aux_loss=*/0);
    auto whole = Gpt::Create(config);
    ASSERT_TRUE(whole.ok());
    FillWeights(**whole, 3);
    config.recompute = recompute;
    std::unique_ptr<Model> parallel =
        MakeParallel(config, {split.tp, split.pp, split.micro_batches});
    ASSERT_NE(parallel, nullptr);
    CopyWeights(**whole, *parallel);
    // Two batches: the second reuses the ranks' MoE layers and counts.
    for (uint32_t seed : {1u, 2u}) {
      const std::vector<int32_t> x = Tokens(kB * kT, config.vocab, seed);
      const std::vector<int32_t> y = Tokens(kB * kT, config.vocab, seed + 100);
      auto want = (*whole)->ForwardBackward(x.data(), y.data(), kB, kT);
      auto got = parallel->ForwardBackward(x.data(), y.data(), kB, kT);
      ASSERT_TRUE(want.ok() && got.ok()) << got.status();
      EXPECT_NEAR(*got, *want, kTol * *want);
      ExpectSameGrads(*parallel, **whole);
      const MoeStats ws = (*whole)->moe_stats(), ps = parallel->moe_stats();
      EXPECT_EQ(ps.load, ws.load);
      EXPECT_EQ(ps.assignments, ws.assignments);
      EXPECT_EQ(ps.dropped, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, ParallelGptMoe,
                         ::testing::Values(Split{2, 1, 1}, Split{1, 3, 3},
                                           Split{2, 2, 2}, Split{3, 2, 5}),
                         [](const ::testing::TestParamInfo<Split>& info) {
                           return "tp" + std::to_string(info.param.tp) + "_pp" +
                                  std::to_string(info.param.pp) + "_m" +
                                  std::to_string(info.param.micro_batches);
                         });

// With drops and the aux loss, capacity and the aux loss are over each
// micro-batch's tokens, and each micro-batch's aux loss weighs by its share
// of the batch, as the trainer's --micro_batches does: the pipeline equals
// the unsplit model run on each micro-batch, its gradients so weighted.
TEST(ParallelGpt, MoeMicroBatchesRouteAsTheTrainersDo) {
  const GptConfig config = MoeConfig(/*capacity=*/0.6f, /*aux_loss=*/0.5f);
  constexpr int kRows = 4;  // two micro-batches of 2 sequences
  auto whole = Gpt::Create(config);
  ASSERT_TRUE(whole.ok());
  FillWeights(**whole, 5);
  const std::vector<int32_t> x = Tokens(kRows * kT, config.vocab, 2);
  const std::vector<int32_t> y = Tokens(kRows * kT, config.vocab, 102);
  for (const int micro : {1, 2}) {
    SCOPED_TRACE(micro);
    auto want = Gpt::Create(config);
    ASSERT_TRUE(want.ok());
    CopyWeights(**whole, **want);
    const size_t n = (*want)->params().size();
    std::vector<std::vector<float>> sum(n);
    double loss = 0;
    int64_t dropped = 0;
    double aux = 0;
    const int rows = kRows / micro;
    for (int k = 0; k < micro; ++k) {
      const size_t at = size_t(k) * rows * kT;
      auto l = (*want)->ForwardBackward(x.data() + at, y.data() + at, rows, kT);
      ASSERT_TRUE(l.ok());
      loss += *l / micro;
      dropped += (*want)->moe_stats().dropped;
      aux += (*want)->moe_stats().aux_loss / micro;
      for (size_t i = 0; i < n; ++i) {
        const float* g = (*want)->grad_data(static_cast<int>(i));
        sum[i].resize((*want)->params()[i].spec.numel(), 0.0f);
        for (size_t j = 0; j < sum[i].size(); ++j) sum[i][j] += g[j] / micro;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      std::copy(sum[i].begin(), sum[i].end(),
                (*want)->grad_data(static_cast<int>(i)));
    }
    std::unique_ptr<Model> parallel = MakeParallel(config, {2, 2, micro});
    ASSERT_NE(parallel, nullptr);
    CopyWeights(**whole, *parallel);
    auto got = parallel->ForwardBackward(x.data(), y.data(), kRows, kT);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(*got, loss, kTol * loss);
    ExpectSameGrads(*parallel, **want);
    const MoeStats ps = parallel->moe_stats();
    EXPECT_GT(dropped, 0);  // the case with drops drops
    EXPECT_EQ(ps.dropped, dropped);
    EXPECT_NEAR(ps.aux_loss, aux, 1e-6 * aux);
  }
}

TEST(ParallelGpt, ReportsEveryGradientOnceInTheUnsplitOrder) {
  for (const GptConfig& config : {OddConfig(), MoeConfig(1.25f, 0.01f)}) {
    SCOPED_TRACE(config.experts);
    ExpectGradientsReportedAsTheUnsplitModel(config);
  }
}

// The waits of ExpectWaitsBeforeEachParameterIsRead, with MoE blocks: every
// parameter, the experts too, before the ranks start.
TEST(ParallelGpt, ReadsNoParameterBeforeItsWaitReturnsWithExperts) {
  const GptConfig config = MoeConfig(1.25f, 0.01f);
  std::unique_ptr<Model> parallel = MakeParallel(config, {2, 2, 2});
  ASSERT_NE(parallel, nullptr);
  FillWeights(*parallel, 3);
  const std::vector<int32_t> x = Tokens(kB * kT, config.vocab, 1);
  const std::vector<int32_t> y = Tokens(kB * kT, config.vocab, 2);
  testing::ExpectWaitsBeforeEachParameterIsRead(*parallel, x.data(), y.data(),
                                                kB, kT);
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
