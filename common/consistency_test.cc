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

TEST(Consistency, ParsesAutoWithItsCapAndItsLoosestMode) {
  struct Case {
    const char* text;
    int cap;
    bool asp;
    const char* shown;
  };
  for (const Case& c :
       {Case{"auto", 4, true, "auto:4"}, Case{"auto:3", 3, true, "auto:3"},
        Case{"auto:3:ssp", 3, false, "auto:3:ssp"},
        Case{"auto:2:asp", 2, true, "auto:2"}}) {
    auto a = ParseAutoConsistency(c.text);
    ASSERT_TRUE(a.ok() && a->has_value()) << c.text << ": " << a.status();
    EXPECT_EQ((*a)->max_staleness, c.cap) << c.text;
    EXPECT_EQ((*a)->allow_asp, c.asp) << c.text;
    EXPECT_EQ((*a)->ToString(), c.shown);
    // What it shows parses back to itself.
    auto again = ParseAutoConsistency((*a)->ToString());
    ASSERT_TRUE(again.ok() && again->has_value());
    EXPECT_EQ((*again)->allow_asp, c.asp);
  }
  for (const char* bad : {"auto:3:bsp", "auto:ssp", "auto::ssp", "auto:0:ssp",
                          "auto:3:ssp:ssp", "auto:3ssp"}) {
    EXPECT_EQ(ParseAutoConsistency(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  auto fixed = ParseAutoConsistency("ssp:2");
  ASSERT_TRUE(fixed.ok());
  EXPECT_FALSE(fixed->has_value());
}

}  // namespace
}  // namespace strata
