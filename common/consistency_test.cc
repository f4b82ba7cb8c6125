#include "common/consistency.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Consistency, ParsesTheThreeModes) {
  EXPECT_EQ(ParseConsistency("bsp")->mode, Consistency::kBsp);
  EXPECT_EQ(ParseConsistency("asp")->mode, Consistency::kAsp);
  auto ssp = ParseConsistency("ssp:2");
  ASSERT_TRUE(ssp.ok());
  EXPECT_EQ(ssp->mode, Consistency::kSsp);
  EXPECT_EQ(ssp->staleness, 2);
  EXPECT_EQ(ssp->ToString(), "ssp:2");
  EXPECT_EQ(ParseConsistency("ssp:0")->staleness, 0);
  EXPECT_EQ(ParseConsistency("ssp:1000000")->staleness, 1000000);
}

// The scheduler, the servers and the CLI all parse with this function, so a
// job one of them accepts is one every other accepts (the scheduler once
// took s up to 2^32 - 1 while its servers refused it).
TEST(Consistency, RejectsMalformedAndOutOfRange) {
  for (const char* bad :
       {"", "BSP", "ssp", "ssp:", "ssp:-1", "ssp:x", "ssp:2x", "ssp:+2",
        "ssp: 2", "ssp:1000001", "ssp:4294967295", "ssp:99999999999"}) {
    const absl::Status s = ParseConsistency(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("1000000"), absl::string_view::npos) << s;
  }
}

// A setting built in code is held to the parser's bounds.
TEST(Consistency, ValidatesWhatTheParserWouldGive) {
  EXPECT_TRUE(ValidateConsistency(*ParseConsistency("ssp:1000000")).ok());
  EXPECT_TRUE(ValidateConsistency(Consistency{}).ok());
  for (int bad : {-1, kMaxStaleness + 1}) {
    EXPECT_TRUE(
        absl::IsInvalidArgument(ValidateConsistency({Consistency::kSsp, bad})))
        << bad;
  }
}

}  // namespace
}  // namespace strata
