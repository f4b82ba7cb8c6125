#include "common/host_cpu.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strata {

absl::StatusOr<HostCpuTicks> ReadHostCpu(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::string line;
  std::getline(in, line);
  const std::vector<absl::string_view> fields =
      absl::StrSplit(line, ' ', absl::SkipEmpty());
  // "cpu", then user nice system idle iowait, then (older kernels may
  // stop here) irq softirq steal guest guest_nice; guest time is counted
  // in user and nice already.
  if (fields.size() < 6 || fields[0] != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a first line \"", line.substr(0, 80),
                     "\" that is not \"cpu <ticks>...\""));
  }
  HostCpuTicks t;
  for (size_t i = 1; i < fields.size() && i <= 8; ++i) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(fields[i], &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field ", i, " of its first line is \"",
                       fields[i], "\", not a tick count"));
    }
    t.total += v;
    if (i == 4 || i == 5) t.idle += v;
  }
  return t;
}

double IdleShare(const HostCpuTicks& before, const HostCpuTicks& after) {
  if (after.total <= before.total || after.idle < before.idle) return 0;
  const double share = static_cast<double>(after.idle - before.idle) /
                       static_cast<double>(after.total - before.total);
  return share > 1 ? 1 : share;
}

}  // namespace strata
