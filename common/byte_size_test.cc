#include "common/byte_size.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(ParseByteSize, ReadsUnitsAndRefusesGarbage) {
  EXPECT_EQ(*ParseByteSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("1.5KiB"), 1536u);
  EXPECT_EQ(*ParseByteSize("3GB"), 3000000000u);
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576u);
  EXPECT_EQ(*ParseByteSize("64m"), 64ull << 20);
  for (const char* bad : {"", "GiB", "12 parsecs", "-1GiB", "1e999", "1.2.3"})
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
}

}  // namespace
}  // namespace strata
