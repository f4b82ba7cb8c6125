#include "common/host_cpu.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "testing/temp_dir.h"

namespace strata {
namespace {

std::string Write(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/stat";
  std::ofstream(path) << text;
  return path;
}

TEST(HostCpu, ReadsIdleAndIowaitOfTheFirstLine) {
  const std::string dir = testing::FreshDir("reads");
  auto t = ReadHostCpu(Write(dir,
                             "cpu  10 2 30 400 5 6 7 8 100 200\n"
                             "cpu0 1 1 1 1 1 1 1 1 1 1\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->idle, 405u);
  // Guest time (the last two) is in user and nice already.
  EXPECT_EQ(t->total, 10u + 2 + 30 + 400 + 5 + 6 + 7 + 8);
}

TEST(HostCpu, RefusesOtherShapes) {
  const std::string dir = testing::FreshDir("shapes");
  for (const char* text : {"", "intr 1 2 3 4 5 6\n", "cpu 1 2 3\n",
                           "cpu 1 2 x 4 5 6\n", "cpu 1 2 3 4 -5 6\n"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(
        absl::IsInvalidArgument(ReadHostCpu(Write(dir, text)).status()));
  }
  EXPECT_TRUE(absl::IsNotFound(ReadHostCpu(dir + "/none").status()));
}

TEST(HostCpu, ReadsThisHost) {
  auto a = ReadHostCpu();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(a->total, 0u);
  EXPECT_LE(a->idle, a->total);
}

TEST(HostCpu, IdleShareOfTheTicksBetween) {
  EXPECT_DOUBLE_EQ(IdleShare({100, 1000}, {130, 1100}), 0.3);
  EXPECT_DOUBLE_EQ(IdleShare({100, 1000}, {100, 1000}), 0);  // no tick
  EXPECT_DOUBLE_EQ(IdleShare({100, 1000}, {90, 1100}), 0);   // went back
  EXPECT_DOUBLE_EQ(IdleShare({100, 1000}, {50, 900}), 0);
}

}  // namespace
}  // namespace strata
