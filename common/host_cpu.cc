#include "common/host_cpu.h"

#include <time.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace strata {
namespace {

absl::StatusOr<std::string> FirstLine(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string line;
  std::getline(in, line);
  return line;
}

absl::StatusOr<CpuTime> ReadHost(const std::string& path) {
  absl::StatusOr<std::string> line = FirstLine(path);
  if (!line.ok()) return line.status();
  const std::vector<absl::string_view> fields =
      absl::StrSplit(*line, ' ', absl::SkipEmpty());
  // "cpu", then user nice system idle iowait, then (older kernels may
  // stop here) irq softirq steal guest guest_nice.
  if (fields.size() < 6 || fields[0] != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a first line \"", line->substr(0, 80),
                     "\" that is not \"cpu <ticks>...\""));
  }
  CpuTime t;
  for (size_t i = 1; i < fields.size() && i <= 8; ++i) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(fields[i], &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field ", i, " of its first line is \"",
                       fields[i], "\", not a tick count"));
    }
    t.total += static_cast<double>(v);
    if (i == 4 || i == 5) t.idle += static_cast<double>(v);
  }
  return t;
}

absl::StatusOr<CpuTime> ReadCgroup(const std::string& dir, double cores) {
  const std::string path = dir + "/cpu.stat";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const double wall_us = 1e6 * static_cast<double>(now.tv_sec) +
                         1e-3 * static_cast<double>(now.tv_nsec);
  for (std::string line; std::getline(in, line);) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "usage_usec ")) continue;
    uint64_t usage = 0;
    if (!absl::SimpleAtoi(rest, &usage)) break;
    CpuTime t;
    t.total = wall_us * cores;
    t.idle = t.total - static_cast<double>(usage);
    return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, " has no \"usage_usec <microseconds>\" line"));
}

}  // namespace

CpuSource FindCpuSource(const std::string& root) {
  CpuSource source;
  source.proc_stat = root + "/proc/stat";
  std::ifstream in(root + "/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    absl::string_view path = line;
    if (!absl::ConsumePrefix(&path, "0::")) continue;  // v2's line
    const std::string dir = absl::StrCat(root, "/sys/fs/cgroup", path);
    absl::StatusOr<std::string> max = FirstLine(dir + "/cpu.max");
    if (!max.ok()) break;
    // "<quota> <period>", or "max <period>" without a quota.
    const std::vector<absl::string_view> f =
        absl::StrSplit(*max, ' ', absl::SkipEmpty());
    double quota = 0, period = 0;
    if (f.size() == 2 && absl::SimpleAtod(f[0], &quota) &&
        absl::SimpleAtod(f[1], &period) && quota > 0 && period > 0) {
      source.cgroup_dir = dir;
      source.cores = quota / period;
    }
    break;
  }
  return source;
}

absl::StatusOr<CpuTime> ReadCpuTime(const CpuSource& source) {
  if (source.cores > 0) return ReadCgroup(source.cgroup_dir, source.cores);
  return ReadHost(source.proc_stat);
}

std::optional<double> IdleShare(const CpuTime& before, const CpuTime& after) {
  const double total = after.total - before.total;
  if (!(total > 0)) return std::nullopt;
  // Below 0: a cgroup that used more than its quota over a short span,
  // or a host whose iowait count went back (it may): all busy.
  return std::clamp((after.idle - before.idle) / total, 0.0, 1.0);
}

}  // namespace strata
