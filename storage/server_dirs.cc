#include "storage/server_dirs.h"

#include <algorithm>
#include <filesystem>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace strata {

absl::StatusOr<std::vector<std::unique_ptr<DataDir>>> OpenServerDirs(
    const std::string& dir) {
  std::vector<std::unique_ptr<DataDir>> servers;
  for (int s = 0;; ++s) {
    const std::string path = absl::StrCat(dir, "/server-", s);
    if (!std::filesystem::exists(path)) break;
    STRATA_ASSIGN_OR_RETURN(auto data_dir,
                            DataDir::Open(path, ShardOwnerTag(s)));
    servers.push_back(std::move(data_dir));
  }
  if (servers.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no server-N directories under ", dir));
  }
  return servers;
}

absl::StatusOr<int64_t> NewestCommonSnapshot(
    const std::vector<std::unique_ptr<DataDir>>& servers, int64_t max_step) {
  std::vector<int64_t> common;
  for (size_t s = 0; s < servers.size(); ++s) {
    STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> steps,
                            servers[s]->ListSnapshots());
    if (steps.empty()) {
      return absl::NotFoundError(
          absl::StrCat(servers[s]->path(), " holds no snapshot"));
    }
    if (s == 0) {
      common = std::move(steps);
      continue;
    }
    std::vector<int64_t> both;
    std::set_intersection(common.begin(), common.end(), steps.begin(),
                          steps.end(), std::back_inserter(both));
    common = std::move(both);
  }
  while (!common.empty() && common.back() > max_step) common.pop_back();
  if (common.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the servers hold no snapshot of one same step at or before step ",
        max_step));
  }
  return common.back();
}

}  // namespace strata
