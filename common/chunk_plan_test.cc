#include "common/chunk_plan.h"

#include <gtest/gtest.h>

#include <limits>

namespace strata {
namespace {

TEST(ChunkPlan, CutsTensorsIntoBoundedChunks) {
  auto plan =
      MakeChunkPlan({{"a", {10, 10}}, {"b", {7}}}, /*chunk_bytes=*/4 * 32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // a: 100 elements in chunks of 32 -> 32,32,32,4; b: 7.
  ASSERT_EQ(plan->chunks.size(), 5u);
  EXPECT_EQ(plan->chunks[3].numel, 4u);
  EXPECT_EQ(plan->chunks[3].offset, 96u);
  EXPECT_EQ(plan->chunks[4].tensor, 1);
  EXPECT_EQ(plan->total_numel, 107u);
  EXPECT_EQ(plan->chunks_of[0].size(), 4u);
}

TEST(ChunkPlan, IdsAreStableAndDistinct) {
  EXPECT_EQ(ChunkId("w", 3), ChunkId("w", 3));
  EXPECT_NE(ChunkId("w", 3), ChunkId("w", 4));
  EXPECT_NE(ChunkId("ab", 0), ChunkId("a", 0));
}

TEST(ChunkPlan, RejectsBadSpecs) {
  EXPECT_FALSE(MakeChunkPlan({{"a", {0}}}).ok());
  EXPECT_FALSE(MakeChunkPlan({{"a", {2}}, {"a", {3}}}).ok());
  EXPECT_FALSE(MakeChunkPlan({{"", {2}}}).ok());
  EXPECT_FALSE(MakeChunkPlan({{"a", {2}}}, 6).ok());
}

TEST(ChunkPlan, PlacementIsBalanced) {
  auto plan =
      MakeChunkPlan({{"a", {1000}}, {"b", {500}}, {"c", {500}}}, 4 * 100);
  ASSERT_TRUE(plan.ok());
  PlaceChunks(*plan, 2);
  uint64_t load[2] = {0, 0};
  for (const auto& c : plan->chunks) load[c.shard] += c.numel;
  EXPECT_EQ(load[0], 1000u);
  EXPECT_EQ(load[1], 1000u);
}

}  // namespace
}  // namespace strata

#include "common/bf16.h"

namespace strata {
namespace {

TEST(Bf16, RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even
  // (1.0).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.00390625f)), 1.0f);
  float nan = Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_TRUE(nan != nan);
}

}  // namespace
}  // namespace strata
