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

// Compressed pulls through a shard: a live worker's first pull is the whole
// weights, the next a delta whose decoding brings its copy to the weights
// (SGD here moves two elements, which TOPK at 1/4 sends exactly); after a
// rollback the next is whole again; a non-worker's, or one naming shared
// memory, is refused; a worker that leaves the view loses its copy.
TEST(ShardCompressed, PullsAreDeltasAgainstTheWorkersCopy) {
  Shard shard(Opts("asp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  v1::PullRequest req;
  req.set_member_id(1);
  req.set_chunk_id(ChunkId("w", 0));
  req.set_clock(0);
  req.set_dtype(v1::DTYPE_TOPK);
  req.set_topk_ratio(0.25);
  std::string out;
  absl::StatusOr<PullResult> whole = shard.Pull(req, &out);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->dtype, v1::DTYPE_F32);
  EXPECT_EQ(out, Bytes(std::vector<float>(kN, 0.0f)));
  std::vector<float> g(kN, 0.0f);
  g[2] = 1;
  g[5] = -3;
  ASSERT_TRUE(shard.Push(PushReq(1, 0, 1), Bytes(g)).ok());
  req.set_delta_base(whole->delta_seq);
  absl::StatusOr<PullResult> delta = shard.Pull(req, &out);
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(delta->dtype, v1::DTYPE_TOPK);
  EXPECT_EQ(delta->delta_base, whole->delta_seq);
  std::vector<float> decoded(kN);
  ASSERT_TRUE(DecodeTopK(out, kN, decoded.data()).ok());
  EXPECT_EQ(decoded, (std::vector<float>{0, 0, -1, 0, 0, 3, 0, 0}));
  EXPECT_EQ(shard.counters().pulls_compressed.load(), 1u);
  EXPECT_EQ(shard.counters().pulls_rebased.load(), 1u);
  v1::StatsResponse stats;
  shard.FillStats(&stats);
  EXPECT_EQ(stats.pull_mirror_floats(), static_cast<uint64_t>(kN));

  // Rolled back to step 0 (the initial weights): the next pull is whole
  // whatever the base, and brings the worker straight back.
  ASSERT_TRUE(shard.RollBack(1, 0, nullptr, nullptr).ok());
  req.set_generation(1);
  req.set_delta_base(delta->delta_seq);
  absl::StatusOr<PullResult> back = shard.Pull(req, &out);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype, v1::DTYPE_F32);
  EXPECT_EQ(out, Bytes(std::vector<float>(kN, 0.0f)));

  v1::PullRequest other = req;
  other.set_member_id(2);
  EXPECT_TRUE(absl::IsUnavailable(shard.Pull(other, &out).status()));
  v1::PullRequest in_shm = req;
  in_shm.mutable_shm()->set_size(4 * kN);
  EXPECT_TRUE(absl::IsInvalidArgument(shard.Pull(in_shm, &out).status()));
  shard.UpdateView(MakeView(2, {3}, 2));
  shard.FillStats(&stats);
  EXPECT_EQ(stats.pull_mirror_floats(), 0u);
}

}  // namespace
}  // namespace strata
