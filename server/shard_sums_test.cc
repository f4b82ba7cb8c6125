// Updates that need sums over whole tensors (LAMB, Adafactor) on a shard:
// under BSP a closed step of a tensor cut into chunks waits for its Reduce
// phases; under ASP each chunk is updated as its own tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "optim/tensor_update.h"
#include "server/shard.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

constexpr int kRows = 6, kCols = 4, kRowsPerChunk = 3;
constexpr int kChunkElems = kRows * kCols / 2;

v1::OptimizerConfig LambConfig() {
  v1::OptimizerConfig o;
  o.set_kind(v1::OptimizerConfig::LAMB);
  o.set_lr(0.1f);
  o.set_weight_decay(0.01f);
  return o;
}

// Tensor "m" of kRows x kCols in two chunks of whole rows, starting at
// 0.1 * (i + 1).
v1::RegisterChunksRequest TwoChunks(const v1::OptimizerConfig& opt,
                                    uint64_t first_numel = kChunkElems) {
  v1::RegisterChunksRequest req;
  auto* g = req.add_groups();
  g->set_name("g");
  *g->mutable_optimizer() = opt;
  for (uint32_t i = 0; i < 2; ++i) {
    auto* c = req.add_chunks();
    c->set_chunk_id(ChunkId("m", i));
    c->set_tensor("m");
    c->set_index(i);
    c->set_offset(i == 0 ? 0 : first_numel);
    c->set_numel(i == 0 ? first_numel : kRows * kCols - first_numel);
    c->set_group("g");
    c->add_tensor_shape(kRows);
    c->add_tensor_shape(kCols);
    c->mutable_init()->set_kind(v1::InitSpec::CONSTANT);
    c->mutable_init()->set_scale(0.5f);
  }
  return req;
}

std::vector<float> Grad(int chunk, int step) {
  std::vector<float> g(kChunkElems);
  for (int i = 0; i < kChunkElems; ++i) {
    g[i] = std::sin(1.0f + i + 7.0f * chunk + 13.0f * step) * 0.1f;
  }
  return g;
}

v1::PushRequest Push(int chunk, int64_t step) {
  v1::PushRequest r = PushReq(1, step, 4);
  r.set_chunk_id(ChunkId("m", chunk));
  return r;
}

v1::ReduceRequest Reduce(int64_t step, int phase,
                         const std::vector<double>& totals = {}) {
  v1::ReduceRequest r;
  r.set_member_id(1);
  r.set_epoch(1);
  r.set_step(step);
  r.set_phase(phase);
  for (uint32_t i = 0; i < 2; ++i) {
    v1::ReduceChunk* c = r.add_chunks();
    c->set_chunk_id(ChunkId("m", i));
    for (double t : totals) c->add_totals(t);
  }
  return r;
}

std::vector<float> PullChunk(Shard& shard, int chunk, uint64_t* version) {
  v1::PullRequest r;
  r.set_member_id(1);
  r.set_chunk_id(ChunkId("m", chunk));
  r.set_clock(-1);
  std::string out;
  auto res = shard.Pull(r, &out);
  EXPECT_TRUE(res.ok()) << res.status();
  *version = res.ok() ? res->version : 0;
  std::vector<float> w(out.size() / 4);
  std::memcpy(w.data(), out.data(), out.size());
  return w;
}

// The tensor's reference weights after `steps` steps, updated whole.
std::vector<float> WholeTensor(const v1::OptimizerConfig& opt, int steps) {
  const OptimizerParams p = *OptimizerParamsFromProto(opt);
  std::vector<float> w(kRows * kCols, 0.5f);
  const TensorPart part = PartOfTensor(p, w.size(), {kRows, kCols}, false);
  std::vector<std::vector<float>> slots;
  for (uint64_t size : StateSizes(p, part)) slots.emplace_back(size, 0.0f);
  for (int t = 0; t < steps; ++t) {
    std::vector<float> g = Grad(0, t);
    const std::vector<float> g1 = Grad(1, t);
    g.insert(g.end(), g1.begin(), g1.end());
    ApplyWholeTensorUpdate({&p, ScheduledLr(p, t), t + 1, part}, w.data(),
                           absl::MakeSpan(slots), g.data());
  }
  return w;
}

std::vector<double> Sum(const v1::ReduceResponse& r) {
  std::vector<double> total(r.chunks(0).partials_size(), 0.0);
  for (const v1::ReducePartials& c : r.chunks()) {
    for (int i = 0; i < c.partials_size(); ++i) total[i] += c.partials(i);
  }
  return total;
}

// Drives every phase of `step`, as PsClient::ReduceStep does.
void ReduceAll(Shard& shard, int64_t step) {
  absl::StatusOr<v1::ReduceResponse> r = shard.Reduce(Reduce(step, 0));
  ASSERT_TRUE(r.ok()) << r.status();
  for (int phase = 1; !r->chunks(0).applied(); ++phase) {
    r = shard.Reduce(Reduce(step, phase, Sum(*r)));
    ASSERT_TRUE(r.ok()) << r.status();
  }
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                int offset) {
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[offset + i], 1e-6) << i;
  }
}

TEST(ShardSums, ABspStepWaitsForItsSumsThenEqualsTheWholeTensorUpdate) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(TwoChunks(LambConfig())).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  for (int step = 0; step < 3; ++step) {
    for (int c = 0; c < 2; ++c) {
      auto pushed = shard.Push(Push(c, step), Bytes(Grad(c, step)));
      ASSERT_TRUE(pushed.ok()) << pushed.status();
      EXPECT_FALSE(pushed->applied());  // closed, waiting for its sums
    }
    uint64_t version;
    PullChunk(shard, 0, &version);
    EXPECT_EQ(version, static_cast<uint64_t>(step));
    // A retry of a push of the closed step changes nothing.
    ASSERT_TRUE(shard.Push(Push(0, step), Bytes(Grad(0, 9))).ok());
    ReduceAll(shard, step);
  }
  const std::vector<float> want = WholeTensor(LambConfig(), 3);
  uint64_t v0, v1;
  ExpectNear(PullChunk(shard, 0, &v0), want, 0);
  ExpectNear(PullChunk(shard, 1, &v1), want, kChunkElems);
  EXPECT_EQ(v0, 3u);
  EXPECT_EQ(v1, 3u);
}

TEST(ShardSums, AdafactorNeedsTwoReductionsAndMatchesTheWholeTensor) {
  v1::OptimizerConfig o;
  o.set_kind(v1::OptimizerConfig::ADAFACTOR);
  o.set_beta1(0.9f);
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(TwoChunks(o)).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  int phases = 0;
  for (int step = 0; step < 3; ++step) {
    for (int c = 0; c < 2; ++c) {
      ASSERT_TRUE(shard.Push(Push(c, step), Bytes(Grad(c, step))).ok());
    }
    absl::StatusOr<v1::ReduceResponse> r = shard.Reduce(Reduce(step, 0));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->chunks(0).partials_size(), kCols + 2);
    for (phases = 1; !r->chunks(0).applied(); ++phases) {
      r = shard.Reduce(Reduce(step, phases, Sum(*r)));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  EXPECT_EQ(phases, 3);  // 0 and 1 gave partials, 2 applied
  const std::vector<float> want = WholeTensor(o, 3);
  uint64_t v;
  ExpectNear(PullChunk(shard, 0, &v), want, 0);
  ExpectNear(PullChunk(shard, 1, &v), want, kChunkElems);
  // State per chunk: its 3 rows, the 4 columns, and m (beta1 > 0).
  v1::StatsResponse stats;
  shard.FillStats(&stats);
  EXPECT_EQ(stats.parameters(), static_cast<uint64_t>(kRows * kCols));
  EXPECT_EQ(stats.state_floats(), 2u * (kRowsPerChunk + kCols + kChunkElems));
  EXPECT_EQ(stats.summed_updates(), 6u);
}

TEST(ShardSums, TheFirstTotalsWinAndLateCallersGetThePartialsAgain) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(TwoChunks(LambConfig())).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  for (int c = 0; c < 2; ++c) {
    ASSERT_TRUE(shard.Push(Push(c, 0), Bytes(Grad(c, 0))).ok());
  }
  absl::StatusOr<v1::ReduceResponse> first = shard.Reduce(Reduce(0, 0));
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(shard.Reduce(Reduce(0, 1, Sum(*first))).ok());
  // Other totals for the same phase change nothing; phase 0 asked again
  // gives the same partials and says the step applied.
  ASSERT_TRUE(shard.Reduce(Reduce(0, 1, {1e9, 1.0})).ok());
  absl::StatusOr<v1::ReduceResponse> late = shard.Reduce(Reduce(0, 0));
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->chunks(1).applied());
  EXPECT_EQ(Sum(*late), Sum(*first));
  uint64_t v;
  ExpectNear(PullChunk(shard, 1, &v), WholeTensor(LambConfig(), 1),
             kChunkElems);
}

TEST(ShardSums, BadReducesAreRefusedAndAnOpenStepTimesOut) {
  Shard shard(Opts("bsp", absl::Milliseconds(100)));
  ASSERT_TRUE(shard.Register(TwoChunks(LambConfig())).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  // The step is not closed: totals are refused, partials wait.
  EXPECT_TRUE(
      absl::IsFailedPrecondition(shard.Reduce(Reduce(0, 1, {1, 1})).status()));
  EXPECT_TRUE(absl::IsDeadlineExceeded(shard.Reduce(Reduce(0, 0)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(shard.Reduce(Reduce(0, 9)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(shard.Reduce(Reduce(-1, 0)).status()));
  for (int c = 0; c < 2; ++c) {
    ASSERT_TRUE(shard.Push(Push(c, 0), Bytes(Grad(c, 0))).ok());
  }
  ASSERT_TRUE(shard.Reduce(Reduce(0, 0)).ok());
  // Totals of the wrong length, and a phase beyond the next, are refused.
  EXPECT_TRUE(
      absl::IsInvalidArgument(shard.Reduce(Reduce(0, 1, {1.0})).status()));
  EXPECT_TRUE(
      absl::IsFailedPrecondition(shard.Reduce(Reduce(0, 2, {1, 1})).status()));
  uint64_t v;
  PullChunk(shard, 0, &v);
  EXPECT_EQ(v, 0u);  // nothing applied
}

TEST(ShardSums, UnderAspEachChunkIsItsOwnTensor) {
  Shard shard(Opts("asp"));
  ASSERT_TRUE(shard.Register(TwoChunks(LambConfig())).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  auto pushed = shard.Push(Push(0, 0), Bytes(Grad(0, 0)));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_TRUE(pushed->applied());
  const OptimizerParams p = *OptimizerParamsFromProto(LambConfig());
  std::vector<float> w(kChunkElems, 0.5f);
  std::vector<std::vector<float>> slots(2, std::vector<float>(kChunkElems));
  const std::vector<float> g = Grad(0, 0);
  ApplyWholeTensorUpdate(
      {&p, p.lr, 1, PartOfTensor(p, kChunkElems, {kRows, kCols}, true)},
      w.data(), absl::MakeSpan(slots), g.data());
  uint64_t v;
  ExpectNear(PullChunk(shard, 0, &v), w, 0);
  EXPECT_EQ(v, 1u);
  EXPECT_TRUE(absl::IsFailedPrecondition(shard.Reduce(Reduce(0, 0)).status()));
}

TEST(ShardSums, AFactoredChunkOfPartRowsIsRefused) {
  v1::OptimizerConfig o;
  o.set_kind(v1::OptimizerConfig::ADAFACTOR);
  Shard shard(Opts("bsp"));
  const absl::Status s = shard.Register(TwoChunks(o, kChunkElems + 1)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("whole rows"), std::string::npos) << s;
  EXPECT_EQ(shard.num_chunks(), 0u);
}

}  // namespace
}  // namespace strata
