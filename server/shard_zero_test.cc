// Zero pushes (ps.proto PushRequest.zero): a mixture-of-experts worker's
// push of an expert none of its tokens reached, without payload. It counts
// as the member's push of the step; a BSP step whose every push is zero
// leaves the chunk's weights and optimizer state as they were.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/shard.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

// SGD with momentum 0.9 and lr 1: the momentum is state that an update of
// a zero gradient would change (and would move the weights by).
v1::RegisterChunksRequest MomentumChunk() {
  v1::RegisterChunksRequest req = OneChunk();
  req.mutable_groups(0)->mutable_optimizer()->set_momentum(0.9f);
  return req;
}

std::vector<float> Grad(float base) {
  std::vector<float> g(kN);
  for (int i = 0; i < kN; ++i) g[i] = base - 0.21f * i;
  return g;
}

v1::PushRequest ZeroReq(uint64_t member, int64_t step, uint64_t samples) {
  v1::PushRequest r = PushReq(member, step, samples);
  r.set_zero(true);
  return r;
}

std::unique_ptr<Shard> MakeShard(const char* mode,
                                 std::vector<uint64_t> workers) {
  auto shard = std::make_unique<Shard>(Opts(mode));
  EXPECT_TRUE(shard->Register(MomentumChunk()).ok());
  shard->UpdateView(MakeView(1, workers, 1));
  return shard;
}

// A step closed on zero pushes alone is skipped: the steps around it apply
// as if they were consecutive (the momentum did not decay in between).
TEST(ShardZero, ABspStepOfZeroPushesLeavesWeightsAndStateAsTheyWere) {
  auto sparse = MakeShard("bsp", {1});
  ASSERT_TRUE(sparse->Push(PushReq(1, 0, 4), Bytes(Grad(1.0f))).ok());
  const std::vector<float> after_first = PullNow(*sparse, 1, -1);
  auto zero = sparse->Push(ZeroReq(1, 1, 4), "");
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE(zero->applied());
  uint64_t version = 0;
  EXPECT_EQ(PullNow(*sparse, 1, -1, &version), after_first);
  EXPECT_EQ(version, 2u);  // the step closed
  ASSERT_TRUE(sparse->Push(PushReq(1, 2, 4), Bytes(Grad(-2.0f))).ok());

  auto consecutive = MakeShard("bsp", {1});
  ASSERT_TRUE(consecutive->Push(PushReq(1, 0, 4), Bytes(Grad(1.0f))).ok());
  ASSERT_TRUE(consecutive->Push(PushReq(1, 1, 4), Bytes(Grad(-2.0f))).ok());
  EXPECT_EQ(PullNow(*sparse, 1, -1), PullNow(*consecutive, 1, -1));

  // A dense sync's push of zeros is an update: the momentum moves the
  // weights, and the result differs.
  auto dense = MakeShard("bsp", {1});
  ASSERT_TRUE(dense->Push(PushReq(1, 0, 4), Bytes(Grad(1.0f))).ok());
  ASSERT_TRUE(
      dense->Push(PushReq(1, 1, 4), Bytes(std::vector<float>(kN, 0.0f))).ok());
  EXPECT_NE(PullNow(*dense, 1, -1), after_first);
  ASSERT_TRUE(dense->Push(PushReq(1, 2, 4), Bytes(Grad(-2.0f))).ok());
  EXPECT_NE(PullNow(*dense, 1, -1), PullNow(*sparse, 1, -1));

  v1::StatsResponse stats;
  sparse->FillStats(&stats);
  EXPECT_EQ(stats.pushes_zero(), 1u);
  EXPECT_EQ(stats.zero_steps(), 1u);
  EXPECT_EQ(stats.bsp_samples_applied(), 12u);  // its samples count
}

// One worker's zero push weighs in with its samples, as zeros would: the
// mean over the step's samples.
TEST(ShardZero, AZeroPushBesideAGradientWeighsAsZeros) {
  auto with_zero = MakeShard("bsp", {1, 2});
  auto with_zeros = MakeShard("bsp", {1, 2});
  for (Shard* s : {with_zero.get(), with_zeros.get()}) {
    ASSERT_TRUE(s->Push(PushReq(1, 0, 3), Bytes(Grad(1.0f))).ok());
  }
  v1::PushRequest rest = ZeroReq(2, 0, 1);
  rest.set_first_sample(3);
  ASSERT_TRUE(with_zero->Push(rest, "").ok());
  rest.set_zero(false);
  ASSERT_TRUE(with_zeros->Push(rest, Bytes(std::vector<float>(kN, 0.0f))).ok());
  uint64_t version = 0;
  const std::vector<float> w = PullNow(*with_zero, 1, -1, &version);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(w, PullNow(*with_zeros, 1, -1));
  v1::StatsResponse stats;
  with_zero->FillStats(&stats);
  EXPECT_EQ(stats.zero_steps(), 0u);  // an update was applied
  EXPECT_EQ(stats.bsp_tiling_errors(), 0u);
}

TEST(ShardZero, AZeroPushWithAPayloadOrForAWholeStepIsRefused) {
  auto shard = MakeShard("bsp", {1});
  const std::vector<float> before = PullNow(*shard, 1, -1);
  auto payload = shard->Push(ZeroReq(1, 0, 4), Bytes(Grad(1.0f)));
  EXPECT_EQ(payload.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(payload.status().message().find("carries a payload"),
            std::string::npos)
      << payload.status();
  v1::PushRequest whole = ZeroReq(1, 0, 4);
  whole.set_whole_step(true);
  EXPECT_EQ(shard->Push(whole, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  uint64_t version = 0;
  EXPECT_EQ(PullNow(*shard, 1, -1, &version), before);
  EXPECT_EQ(version, 0u);  // nothing counted
}

// SSP/ASP: nothing to apply; the version (updates applied) stays.
TEST(ShardZero, AnAsyncZeroPushAppliesNothing) {
  for (const char* mode : {"asp", "ssp:1"}) {
    SCOPED_TRACE(mode);
    auto shard = MakeShard(mode, {1});
    ASSERT_TRUE(shard->Push(PushReq(1, 0, 4), Bytes(Grad(1.0f))).ok());
    uint64_t version = 0;
    const std::vector<float> before = PullNow(*shard, 1, -1, &version);
    auto zero = shard->Push(ZeroReq(1, 1, 4), "");
    ASSERT_TRUE(zero.ok()) << zero.status();
    uint64_t after = 0;
    EXPECT_EQ(PullNow(*shard, 1, -1, &after), before);
    EXPECT_EQ(after, version);
    // The member's clock moved past step 1: a pull at clock 2 within the
    // staleness bound answers at once.
    EXPECT_EQ(PullNow(*shard, 1, 2), before);
  }
}

// Held until the commit like any deferred push, then counted as a zero.
TEST(ShardZero, ADeferredZeroPushClosesTheStepOnItsCommit) {
  auto shard = MakeShard("bsp", {1, 2});
  v1::PushRequest real = PushReq(1, 0, 2);
  real.set_deferred(true);
  v1::PushRequest zero = ZeroReq(2, 0, 2);
  zero.set_deferred(true);
  zero.set_first_sample(2);
  ASSERT_TRUE(shard->Push(real, Bytes(Grad(1.0f))).ok());
  // A retry of the zero push replaces the held one (still one to commit).
  ASSERT_TRUE(shard->Push(zero, "").ok());
  ASSERT_TRUE(shard->Push(zero, "").ok());
  auto commit = [&](uint64_t member) {
    v1::CommitRequest c;
    c.set_member_id(member);
    c.set_step(0);
    c.set_scale(0.5f);
    c.set_pushes(1);
    return shard->Commit(c);
  };
  ASSERT_TRUE(commit(1).ok());
  auto last = commit(2);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->applied(), 1u);

  auto reference = MakeShard("bsp", {1, 2});
  std::vector<float> scaled = Grad(1.0f);
  for (float& g : scaled) g *= 0.5f;  // the commit's scale
  ASSERT_TRUE(reference->Push(PushReq(1, 0, 2), Bytes(scaled)).ok());
  v1::PushRequest none = PushReq(2, 0, 2);
  none.set_first_sample(2);
  ASSERT_TRUE(reference->Push(none, Bytes(std::vector<float>(kN, 0.0f))).ok());
  const std::vector<float> got = PullNow(*shard, 1, -1);
  const std::vector<float> want = PullNow(*reference, 1, -1);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace strata
