#include "common/host_cpu.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "testing/temp_dir.h"

namespace strata {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(HostCpu, ReadsIdleAndIowaitOfTheFirstLine) {
  const std::string dir = testing::FreshDir("reads");
  Write(dir + "/stat",
        "cpu  10 2 30 400 5 6 7 8 100 200\ncpu0 1 1 1 1 1 1 1 1 1 1\n");
  CpuSource source;
  source.proc_stat = dir + "/stat";
  auto t = ReadCpuTime(source);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->idle, 405);
  // Guest time (the last two) is in user and nice already.
  EXPECT_EQ(t->total, 10 + 2 + 30 + 400 + 5 + 6 + 7 + 8);
}

TEST(HostCpu, RefusesOtherShapes) {
  const std::string dir = testing::FreshDir("shapes");
  CpuSource source;
  source.proc_stat = dir + "/stat";
  for (const char* text : {"", "intr 1 2 3 4 5 6\n", "cpu 1 2 3\n",
                           "cpu 1 2 x 4 5 6\n", "cpu 1 2 3 4 -5 6\n"}) {
    SCOPED_TRACE(text);
    Write(source.proc_stat, text);
    EXPECT_TRUE(absl::IsInvalidArgument(ReadCpuTime(source).status()));
  }
  source.proc_stat = dir + "/none";
  EXPECT_TRUE(absl::IsNotFound(ReadCpuTime(source).status()));
}

TEST(HostCpu, ReadsThisProcessesSource) {
  auto a = ReadCpuTime(FindCpuSource());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(a->total, 0);
  EXPECT_LE(a->idle, a->total);
}

// A container run with a CPU quota (cgroup v2's cpu.max) counts the
// quota's time: its usage against the quota's share of the wall time.
TEST(HostCpu, ACgroupWithAQuotaCountsItsOwnUsage) {
  const std::string root = testing::FreshDir("cgroup");
  Write(root + "/proc/self/cgroup", "0::/job/worker\n");
  const std::string cg = root + "/sys/fs/cgroup/job/worker";
  Write(cg + "/cpu.max", "150000 100000\n");
  Write(cg + "/cpu.stat", "usage_usec 1000\nuser_usec 900\n");
  CpuSource source = FindCpuSource(root);
  EXPECT_EQ(source.cgroup_dir, cg);
  EXPECT_DOUBLE_EQ(source.cores, 1.5);
  auto before = ReadCpuTime(source);
  ASSERT_TRUE(before.ok()) << before.status();
  // The usage moves by at most what passed: the share is what is left.
  CpuTime after = *before;
  after.total += 1.5e6;  // a second of 1.5 cores
  after.idle += 1.5e6 - 3e5;
  EXPECT_DOUBLE_EQ(*IdleShare(*before, after), 1 - 0.2);
  Write(cg + "/cpu.stat", "user_usec 900\n");
  EXPECT_TRUE(absl::IsInvalidArgument(ReadCpuTime(source).status()));
  // No quota ("max"), or no cgroup v2: the host's /proc/stat.
  Write(cg + "/cpu.max", "max 100000\n");
  source = FindCpuSource(root);
  EXPECT_EQ(source.cores, 0);
  EXPECT_EQ(source.proc_stat, root + "/proc/stat");
  Write(root + "/proc/self/cgroup", "4:memory:/job\n");
  EXPECT_EQ(FindCpuSource(root).cores, 0);
}

TEST(HostCpu, ACgroupsReadingsFollowTheClockAndItsUsage) {
  const std::string root = testing::FreshDir("cgroup-read");
  const std::string cg = root + "/sys/fs/cgroup/w";
  Write(root + "/proc/self/cgroup", "0::/w\n");
  Write(cg + "/cpu.max", "100000 100000\n");
  Write(cg + "/cpu.stat", "usage_usec 5000\n");
  const CpuSource source = FindCpuSource(root);
  auto a = ReadCpuTime(source);
  Write(cg + "/cpu.stat", "usage_usec 5000\n");  // idle meanwhile
  auto b = ReadCpuTime(source);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GE(b->total, a->total);
  // Nothing used between the readings: all of the time passed was idle.
  EXPECT_DOUBLE_EQ(b->total - a->total, b->idle - a->idle);
}

TEST(HostCpu, IdleShareOfTheTimeBetween) {
  EXPECT_DOUBLE_EQ(*IdleShare({100, 1000}, {130, 1100}), 0.3);
  EXPECT_FALSE(IdleShare({100, 1000}, {100, 1000}).has_value());  // no tick
  EXPECT_DOUBLE_EQ(*IdleShare({100, 1000}, {90, 1100}), 0);       // went back
  EXPECT_FALSE(IdleShare({100, 1000}, {50, 900}).has_value());
  EXPECT_DOUBLE_EQ(*IdleShare({0, 0}, {500, 100}), 1);
}

}  // namespace
}  // namespace strata
