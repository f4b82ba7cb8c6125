// BSP pushes of a whole step (all-reduce sync, PushRequest.whole_step): one
// push closes the step alone, replaces what else was pushed for it, and is
// refused where it cannot mean that.
#include <gtest/gtest.h>

#include <vector>

#include "server/shard.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

v1::PushRequest WholeStep(uint64_t member, int64_t step, uint64_t samples) {
  v1::PushRequest r = PushReq(member, step, samples);
  r.set_whole_step(true);
  return r;
}

TEST(ShardWholeStep, OnePushClosesTheStepForEveryLiveWorker) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2, 3}, 1));
  auto r = shard.Push(WholeStep(2, 0, 12), Bytes(std::vector<float>(kN, 2.0f)));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied());
  EXPECT_EQ(r->version(), 1u);
  uint64_t version = 0;
  std::vector<float> w = PullNow(shard, 1, 1, &version);
  EXPECT_EQ(version, 1u);
  // The pushed gradient itself (weight 1): SGD lr 1 from zeros.
  for (float x : w) EXPECT_FLOAT_EQ(x, -2.0f);
  // A retry changes nothing.
  r = shard.Push(WholeStep(2, 0, 12), Bytes(std::vector<float>(kN, 2.0f)));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->applied());
}

TEST(ShardWholeStep, ReplacesThePerWorkerPushesOfItsStep) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  ASSERT_TRUE(
      shard.Push(PushReq(1, 0, 3), Bytes(std::vector<float>(kN, 100.0f))).ok());
  auto r = shard.Push(WholeStep(2, 0, 4), Bytes(std::vector<float>(kN, 1.0f)));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied());
  for (float x : PullNow(shard, 1, 1)) EXPECT_FLOAT_EQ(x, -1.0f);
}

TEST(ShardWholeStep, RefusedWhereItCannotCloseAStep) {
  for (const char* mode : {"ssp:2", "asp"}) {
    Shard shard(Opts(mode));
    ASSERT_TRUE(shard.Register(OneChunk()).ok());
    shard.UpdateView(MakeView(1, {1}, 1));
    EXPECT_EQ(
        shard.Push(WholeStep(1, 0, 1), Bytes(std::vector<float>(kN, 1.0f)))
            .status()
            .code(),
        absl::StatusCode::kInvalidArgument)
        << mode;
  }
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  v1::PushRequest deferred = WholeStep(1, 0, 1);
  deferred.set_deferred(true);
  EXPECT_EQ(
      shard.Push(deferred, Bytes(std::vector<float>(kN, 1.0f))).status().code(),
      absl::StatusCode::kInvalidArgument);
  // From a view older than the workers': the step's split changed.
  shard.UpdateView(MakeView(2, {1, 2}, 2));
  EXPECT_EQ(shard.Push(WholeStep(1, 0, 1), Bytes(std::vector<float>(kN, 1.0f)))
                .status()
                .code(),
            absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace strata
