// Expert parallelism (--ep, model/gpt_expert_parallel.h): N ranks, each
// with its share of the sequences and E/N experts, give the losses,
// gradients and routing of one Gpt on the whole batch when nothing drops;
// a failing rank fails the call and the next one works; bad splits are
// refused.
#include "model/gpt_expert_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/gpt.h"
#include "testing/gpt_test_util.h"

namespace strata {
namespace {

using testing::MakeGpt;
using testing::RandomTokens;
using testing::TinyConfig;

// 8 experts in every block, capacity for every token (F = E / top_k
// gives N slots an expert): nothing drops, on one model or on a rank.
GptConfig MoeConfig(int top_k) {
  GptConfig c = TinyConfig();
  c.experts = 8;
  c.top_k = top_k;
  c.moe_every = 1;
  c.capacity = 8.0f / top_k;
  c.aux_loss = 0.05f;  // large enough to move the router's gradient
  return c;
}

std::unique_ptr<ExpertParallelGpt> MakeEp(const GptConfig& c, int ranks,
                                          uint64_t seed) {
  auto gpt = ExpertParallelGpt::Create(c, ranks);
  EXPECT_TRUE(gpt.ok()) << gpt.status();
  if (!gpt.ok()) return nullptr;
  (*gpt)->InitParams(seed);
  return std::move(*gpt);
}

// The largest |a - b| / (1 + |b|) over parameter i's gradients.
double GradDiff(Model& a, Model& b, int i) {
  const int64_t n = static_cast<int64_t>(a.params()[i].spec.numel());
  double worst = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double x = a.grad_data(i)[k], y = b.grad_data(i)[k];
    worst = std::max(worst, std::abs(x - y) / (1 + std::abs(y)));
  }
  return worst;
}

void SgdStep(Model& m, float lr) {
  for (int i = 0; i < static_cast<int>(m.params().size()); ++i) {
    const int64_t n = static_cast<int64_t>(m.params()[i].spec.numel());
    for (int64_t k = 0; k < n; ++k)
      m.param_data(i)[k] -= lr * m.grad_data(i)[k];
  }
}

struct Split {
  int ranks, top_k, batch;
};

class ExpertParallelTest : public ::testing::TestWithParam<Split> {};

// 20 SGD steps side by side: every step's loss, aux loss and per-expert
// loads agree, and every gradient to rounding.
TEST_P(ExpertParallelTest, TrainsAsOneGptOnTheWholeBatch) {
  const Split s = GetParam();
  const GptConfig c = MoeConfig(s.top_k);
  auto one = MakeGpt(c, 7);
  auto ep = MakeEp(c, s.ranks, 7);
  ASSERT_NE(ep, nullptr);
  const int T = 8;
  for (int step = 0; step < 20; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const auto tokens = RandomTokens(s.batch * T, c.vocab, 100 + step);
    const auto targets = RandomTokens(s.batch * T, c.vocab, 200 + step);
    auto want = one->ForwardBackward(tokens.data(), targets.data(), s.batch, T);
    auto got = ep->ForwardBackward(tokens.data(), targets.data(), s.batch, T);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(*got, *want, 1e-5);
    const MoeStats a = one->moe_stats(), b = ep->moe_stats();
    EXPECT_NEAR(b.aux_loss, a.aux_loss, 1e-6);
    EXPECT_EQ(b.load, a.load);
    EXPECT_EQ(b.dropped, 0);
    EXPECT_EQ(b.assignments, a.assignments);
    for (int i = 0; i < static_cast<int>(one->params().size()); ++i) {
      ASSERT_LT(GradDiff(*ep, *one, i), 2e-5) << one->params()[i].spec.name;
      EXPECT_EQ(ep->ParamUnused(i), one->ParamUnused(i))
          << one->params()[i].spec.name;
    }
    SgdStep(*one, 0.5f);
    SgdStep(*ep, 0.5f);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ExpertParallelTest,
                         ::testing::Values(Split{2, 1, 4}, Split{2, 2, 4},
                                           Split{4, 1, 6}, Split{4, 2, 8}),
                         [](const ::testing::TestParamInfo<Split>& info) {
                           return absl::StrCat("ep", info.param.ranks, "_top",
                                               info.param.top_k, "_batch",
                                               info.param.batch);
                         });

TEST(ExpertParallel, ABatchOfFewerSequencesThanRanksRunsWhole) {
  const GptConfig c = MoeConfig(2);
  auto one = MakeGpt(c, 3);
  auto ep = MakeEp(c, 4, 3);
  const auto tokens = RandomTokens(2 * 8, c.vocab, 5);
  auto want = one->ForwardBackward(tokens.data(), tokens.data(), 2, 8);
  auto got = ep->ForwardBackward(tokens.data(), tokens.data(), 2, 8);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(*got, *want);
  for (int i = 0; i < static_cast<int>(one->params().size()); ++i) {
    ASSERT_EQ(GradDiff(*ep, *one, i), 0) << one->params()[i].spec.name;
  }
}

// Every parameter is reported ready once, in Gpt's order (all-reduce sync
// buckets tensors in that order on every worker, split or not), whether
// the ranks or the host ran the batch.
TEST(ExpertParallel, ReportsGradientsReadyInGptsOrder) {
  const GptConfig c = MoeConfig(2);
  auto one = MakeGpt(c, 2);
  auto ep = MakeEp(c, 2, 2);
  std::vector<int> want, got;
  one->SetGradReadyCallback([&want](int i) { want.push_back(i); });
  ep->SetGradReadyCallback([&got](int i) { got.push_back(i); });
  for (int B : {4, 1}) {
    want.clear();
    got.clear();
    const auto tokens = RandomTokens(B * 8, c.vocab, 11);
    ASSERT_TRUE(one->ForwardBackward(tokens.data(), tokens.data(), B, 8).ok());
    ASSERT_TRUE(ep->ForwardBackward(tokens.data(), tokens.data(), B, 8).ok());
    EXPECT_EQ(got, want) << "batch " << B;
    EXPECT_EQ(got.size(), one->params().size());
  }
}

// Gradients added over micro-batches (accumulate) are the sums of each.
TEST(ExpertParallel, AccumulatesOverMicroBatches) {
  const GptConfig c = MoeConfig(1);
  auto one = MakeGpt(c, 4);
  auto ep = MakeEp(c, 2, 4);
  for (int mb = 0; mb < 2; ++mb) {
    const auto tokens = RandomTokens(4 * 8, c.vocab, 40 + mb);
    ASSERT_TRUE(
        one->ForwardBackward(tokens.data(), tokens.data(), 4, 8, mb > 0).ok());
    ASSERT_TRUE(
        ep->ForwardBackward(tokens.data(), tokens.data(), 4, 8, mb > 0).ok());
  }
  for (int i = 0; i < static_cast<int>(one->params().size()); ++i) {
    ASSERT_LT(GradDiff(*ep, *one, i), 2e-5) << one->params()[i].spec.name;
  }
}

// A router logit that is not finite on one rank's tokens alone fails the
// call with that rank's error (not the others' report of its abort); the
// next call, on good weights, runs on a new group.
TEST(ExpertParallel, ARankThatFailsFailsTheCallAndTheNextCallWorks) {
  const GptConfig c = MoeConfig(2);
  auto one = MakeGpt(c, 9);
  auto ep = MakeEp(c, 2, 9);
  const int B = 4, T = 8;
  std::vector<int32_t> tokens(B * T, 1);
  // Token 3 appears only in rank 1's sequences (rows 2 and 3).
  tokens[2 * T + 5] = 3;
  float* wte = ep->param_data(0);
  const float saved = wte[3 * c.width];
  wte[3 * c.width] = std::numeric_limits<float>::infinity();
  auto failed = ep->ForwardBackward(tokens.data(), tokens.data(), B, T);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument)
      << failed.status();
  EXPECT_NE(failed.status().message().find("not finite"), std::string::npos)
      << failed.status();
  wte[3 * c.width] = saved;
  auto want = one->ForwardBackward(tokens.data(), tokens.data(), B, T);
  auto got = ep->ForwardBackward(tokens.data(), tokens.data(), B, T);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, *want, 1e-5);
}

TEST(ExpertParallel, RefusesSplitsItCannotMake) {
  GptConfig c = MoeConfig(2);
  EXPECT_EQ(ExpertParallelGpt::Create(c, 3).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "3 ranks cannot hold 8 experts evenly";
  EXPECT_EQ(ExpertParallelGpt::Create(c, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpertParallelGpt::Create(TinyConfig(), 2).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a dense model has no experts to split";
  ModelParallelism with_tp;
  with_tp.tp = 2;
  with_tp.ep = 2;
  EXPECT_EQ(CreateModel(c, Device::kCpu, with_tp).status().code(),
            absl::StatusCode::kUnimplemented);
  ModelParallelism ep_only;
  ep_only.ep = 4;
  auto model = CreateModel(c, Device::kCpu, ep_only);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE(dynamic_cast<ExpertParallelGpt*>(model->get()), nullptr);
}

}  // namespace
}  // namespace strata
