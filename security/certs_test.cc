#include "security/certs.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "security/tls.h"
#include "testing/temp_dir.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

using ::strata::testing::TempDir;

TEST(Certs, EachRoleFileLoadsAsThatRole) {
  const std::string dir = TempDir("roles");
  ASSERT_TRUE(WriteClusterCerts({.out_dir = dir}).ok());
  for (Role r : kAllRoles) {
    const std::string base = dir + "/" + std::string(RoleName(r));
    auto s = Security::Load(
        {.cert = base + ".pem", .key = base + ".key", .ca = dir + "/ca.pem"});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE((*s)->tls());
    EXPECT_EQ((*s)->role(), r);
  }
}

TEST(Certs, KeysAreReadableByTheOwnerOnly) {
  const std::string dir = TempDir("modes");
  ASSERT_TRUE(WriteClusterCerts({.out_dir = dir}).ok());
  for (const char* f : {"ca.key", "worker.key", "server.key"}) {
    struct stat st;
    ASSERT_EQ(::stat((dir + "/" + f).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
}

TEST(Certs, RefusesToReplaceACaUnlessAskedTo) {
  const std::string dir = TempDir("again");
  ASSERT_TRUE(WriteClusterCerts({.out_dir = dir}).ok());
  absl::Status again = WriteClusterCerts({.out_dir = dir});
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_THAT(again.message(), HasSubstr("--overwrite"));
  EXPECT_TRUE(WriteClusterCerts({.out_dir = dir, .overwrite = true}).ok());
}

TEST(Certs, UnwritableDirectoryIsNamed) {
  absl::Status s = WriteClusterCerts({.out_dir = "/proc/strata-certs"});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("/proc/strata-certs"));
}

TEST(Certs, RefusesAnEmptyValidity) {
  const absl::Time now = absl::Now();
  auto ca = MakeCa({.common_name = "ca", .not_before = now, .not_after = now});
  EXPECT_TRUE(absl::IsInvalidArgument(ca.status())) << ca.status();
}

}  // namespace
}  // namespace strata
