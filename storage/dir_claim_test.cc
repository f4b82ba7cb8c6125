#include "storage/dir_claim.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/storage/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

TEST(DirClaim, HeldUntilReleasedAndOnlyByItsOwner) {
  testing::ScopedTempDir tmp;
  {
    auto claim = DirClaim::Acquire(tmp.path(), "scheduler");
    ASSERT_TRUE(claim.ok()) << claim.status();
    EXPECT_TRUE(fs::exists(tmp.path() + "/STRATA_DATADIR"));
    auto second = DirClaim::Acquire(tmp.path(), "scheduler");
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(second.status().message(), "in use"))
        << second.status();
  }
  EXPECT_TRUE(DirClaim::Acquire(tmp.path(), "scheduler").ok());
  auto other = DirClaim::Acquire(tmp.path(), "shard-0");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(other.status().message(), "\"scheduler\""))
      << other.status();
}

TEST(DirClaim, AdoptsADirectoryMarkedInTheLegacyWay) {
  testing::ScopedTempDir tmp;
  fs::create_directories(tmp.path() + "/state");
  std::ofstream(tmp.path() + "/OLD_MARKER") << "strata scheduler state v1\n";
  std::ofstream(tmp.path() + "/state/CURRENT") << "kept";
  // Without the legacy name it is someone else's directory.
  auto refused = DirClaim::Acquire(tmp.path(), "scheduler");
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "not a Strata data directory"))
      << refused.status();
  {
    auto claim = DirClaim::Acquire(tmp.path(), "scheduler", "OLD_MARKER");
    ASSERT_TRUE(claim.ok()) << claim.status();
  }
  EXPECT_FALSE(fs::exists(tmp.path() + "/OLD_MARKER"));
  EXPECT_TRUE(fs::exists(tmp.path() + "/state/CURRENT"));
  // Adopted: the marker alone claims it now.
  EXPECT_TRUE(DirClaim::Acquire(tmp.path(), "scheduler").ok());
}

TEST(DirClaim, RefusesBadOwnerTagsAndFiles) {
  testing::ScopedTempDir tmp;
  EXPECT_EQ(DirClaim::Acquire(tmp.path(), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DirClaim::Acquire(tmp.path(), "a\nb").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::ofstream(tmp.path()) << "a file";
  EXPECT_EQ(DirClaim::Acquire(tmp.path(), "x").status().code(),
            absl::StatusCode::kFailedPrecondition);
  fs::remove(tmp.path());
}

}  // namespace
}  // namespace strata
