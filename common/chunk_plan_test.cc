#include "common/chunk_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

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

TEST(ChunkPlan, CutsAtWholeRowsWhenAsked) {
  TensorSpec a{"a", {10, 10}};
  a.row_elems = 10;
  TensorSpec wide{"wide", {2, 50}};
  wide.row_elems = 50;
  auto plan = MakeChunkPlan({a, wide}, /*chunk_bytes=*/4 * 32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // a: 3 rows (30) per chunk -> 30,30,30,10; wide: a row (50) each.
  ASSERT_EQ(plan->chunks_of[0].size(), 4u);
  for (int i : plan->chunks_of[0]) {
    EXPECT_EQ(plan->chunks[i].offset % 10, 0u);
    EXPECT_EQ(plan->chunks[i].numel % 10, 0u);
  }
  EXPECT_EQ(plan->chunks[3].numel, 10u);
  ASSERT_EQ(plan->chunks_of[1].size(), 2u);
  EXPECT_EQ(plan->chunks[plan->chunks_of[1][1]].offset, 50u);
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

// The array conversion (its own branch-free rounding) agrees with the one
// above on every kind of value, NaNs whose rounding would wrap or carry
// into the exponent included.
TEST(Bf16, ArrayConversionMatchesTheScalarOne) {
  std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u,
      0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
      0x00000001u, 0x807fffffu, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
      0x7fffffffu, 0xffffffffu, 0x7f80ffffu};
  for (uint32_t s = 1; s < 2000; ++s) bits.push_back(s * 2654435761u);
  std::vector<float> in(bits.size());
  std::memcpy(in.data(), bits.data(), bits.size() * 4);
  for (size_t len : {size_t{12}, bits.size()}) {  // without and with NaNs
    std::vector<uint16_t> out(len);
    FloatToBf16(in.data(), out.data(), len);
    for (size_t i = 0; i < len; ++i) {
      EXPECT_EQ(out[i], FloatToBf16(in[i])) << std::hex << bits[i];
    }
  }
}

}  // namespace
}  // namespace strata
