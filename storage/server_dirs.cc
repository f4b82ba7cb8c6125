#include "storage/server_dirs.h"

#include <algorithm>
#include <filesystem>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace strata {

absl::StatusOr<std::vector<std::string>> ServerDirPaths(
    const std::string& dir) {
  std::vector<std::string> paths;
  for (int s = 0;; ++s) {
    std::string path = absl::StrCat(dir, "/server-", s);
    if (!std::filesystem::exists(path)) break;
    paths.push_back(std::move(path));
  }
  if (paths.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no server-N directories under ", dir));
  }
  return paths;
}

absl::StatusOr<std::vector<std::vector<std::string>>> ServerDirsBySlot(
    const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> first, ServerDirPaths(dir));
  std::vector<std::vector<std::string>> slots;
  for (std::string& path : first) slots.push_back({std::move(path)});
  for (int r = 1;; ++r) {
    const std::string set = absl::StrCat(dir, "/replica-", r);
    if (!std::filesystem::exists(set)) break;
    for (size_t s = 0; s < slots.size(); ++s) {
      std::string path = absl::StrCat(set, "/server-", s);
      if (std::filesystem::exists(path)) slots[s].push_back(std::move(path));
    }
  }
  return slots;
}

absl::StatusOr<std::vector<std::unique_ptr<DataDir>>> OpenServerDirs(
    const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> paths, ServerDirPaths(dir));
  std::vector<std::unique_ptr<DataDir>> servers;
  for (size_t s = 0; s < paths.size(); ++s) {
    STRATA_ASSIGN_OR_RETURN(
        auto data_dir,
        DataDir::Open(paths[s], ShardOwnerTag(static_cast<int>(s))));
    servers.push_back(std::move(data_dir));
  }
  return servers;
}

absl::StatusOr<int64_t> NewestCommonStep(
    const std::vector<std::string>& paths,
    const std::vector<std::vector<int64_t>>& steps, int64_t max_step) {
  std::vector<int64_t> common;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (steps[s].empty()) {
      return absl::NotFoundError(absl::StrCat(paths[s], " holds no snapshot"));
    }
    if (s == 0) {
      common = steps[s];
      continue;
    }
    std::vector<int64_t> both;
    std::set_intersection(common.begin(), common.end(), steps[s].begin(),
                          steps[s].end(), std::back_inserter(both));
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

absl::StatusOr<int64_t> NewestCommonSnapshot(
    const std::vector<std::unique_ptr<DataDir>>& servers, int64_t max_step) {
  std::vector<std::string> paths;
  std::vector<std::vector<int64_t>> steps;
  for (const auto& server : servers) {
    paths.push_back(server->path());
    STRATA_ASSIGN_OR_RETURN(steps.emplace_back(), server->ListSnapshots());
  }
  return NewestCommonStep(paths, steps, max_step);
}

}  // namespace strata
