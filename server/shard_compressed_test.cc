// Compressed pushes (ONEBIT, TOPK: common/compress.h) on a shard: decoded
// and applied as their fp32 values would be; a malformed or non-finite
// one refused, nothing applied.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/compress.h"
#include "server/shard.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

v1::PushRequest Compressed(v1::DType dtype, int64_t step) {
  v1::PushRequest r = PushReq(1, step, 1);
  r.set_dtype(dtype);
  return r;
}

TEST(ShardCompressed, DecodedPushesApplyAsTheirValues) {
  Shard shard(Opts("asp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());  // SGD, lr 1
  shard.UpdateView(MakeView(1, {1}, 1));
  const std::vector<float> g = {1, -2, 3, -4, 5, -6, 7, -8};
  std::string onebit(OneBitBytes(kN), '\0');
  std::vector<float> sent(kN);
  EncodeOneBit(g.data(), kN, onebit.data(), sent.data());
  ASSERT_TRUE(shard.Push(Compressed(v1::DTYPE_ONEBIT, 0), onebit).ok());
  std::vector<float> want(kN);
  for (int i = 0; i < kN; ++i) want[i] = -sent[i];  // 0 - 1 * g
  EXPECT_EQ(PullNow(shard, 1, -1), want);
  std::string topk;
  EncodeTopK(g.data(), kN, 2, &topk, sent.data());
  ASSERT_TRUE(shard.Push(Compressed(v1::DTYPE_TOPK, 1), topk).ok());
  want[6] -= 7;
  want[7] += 8;
  EXPECT_EQ(PullNow(shard, 1, -1), want);
}

TEST(ShardCompressed, MalformedOrNonFinitePushesAreRefused) {
  Shard shard(Opts("asp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  std::string onebit(OneBitBytes(kN), '\0');
  EXPECT_TRUE(absl::IsInvalidArgument(
      shard.Push(Compressed(v1::DTYPE_ONEBIT, 0), onebit + "x").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      shard.Push(Compressed(v1::DTYPE_TOPK, 0), std::string(9 * 8, '\0'))
          .status()));  // more pairs than elements
  std::vector<float> g(kN, 1.0f), sent(kN);
  g[3] = std::numeric_limits<float>::infinity();
  EncodeOneBit(g.data(), kN, onebit.data(), sent.data());
  EXPECT_TRUE(absl::IsInvalidArgument(
      shard.Push(Compressed(v1::DTYPE_ONEBIT, 0), onebit).status()));
  EXPECT_EQ(shard.counters().rejected_nonfinite.load(), 1u);
  EXPECT_EQ(shard.counters().rejected_other.load(), 2u);
  EXPECT_EQ(PullNow(shard, 1, -1), std::vector<float>(kN, 0.0f));
}

}  // namespace
}  // namespace strata
