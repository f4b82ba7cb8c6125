#include "worker/snapshot_loader.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "storage/data_dir.h"
#include "storage/ram_tier.h"
#include "strata/v1/ps.pb.h"

namespace strata {
namespace {

// Copies the chunks of `records` into `model`, counting values per param.
absl::Status FillFrom(const RamTier& records, Model& model,
                      std::vector<uint64_t>& filled) {
  return records.ForEach([&](const ChunkRecord& rec) -> absl::Status {
    v1::ChunkSpec spec;
    if (!spec.ParseFromString(rec.spec))
      return absl::DataLossError("corrupt chunk spec");
    for (size_t i = 0; i < model.params().size(); ++i) {
      const TensorSpec& t = model.params()[i].spec;
      if (t.name != spec.tensor()) continue;
      if (spec.offset() + rec.weights.size() > t.numel()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "snapshot tensor ", t.name, " does not fit this model config"));
      }
      std::copy(rec.weights.begin(), rec.weights.end(),
                model.param_data(static_cast<int>(i)) + spec.offset());
      filled[i] += rec.weights.size();
    }
    return absl::OkStatus();
  });
}

}  // namespace

namespace {

// The servers' data directories under `dir`: server-0, server-1, ... up to
// the first missing one.
absl::StatusOr<std::vector<std::string>> ServerDirs(const std::string& dir) {
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

// The newest step every one of `servers` holds a snapshot of.
absl::StatusOr<int64_t> NewestCommonStep(
    const std::vector<std::string>& servers) {
  std::vector<int64_t> common;
  for (size_t s = 0; s < servers.size(); ++s) {
    STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> steps,
                            ListSnapshotsIn(servers[s]));
    if (steps.empty()) {
      return absl::NotFoundError(
          absl::StrCat(servers[s], " holds no snapshot"));
    }
    if (s > 0) {
      std::vector<int64_t> both;
      std::set_intersection(common.begin(), common.end(), steps.begin(),
                            steps.end(), std::back_inserter(both));
      steps = std::move(both);
    }
    common = std::move(steps);
  }
  if (common.empty()) {
    return absl::FailedPreconditionError(
        "the servers hold no snapshot of one same step");
  }
  return common.back();
}

// Fills `model` from every server's snapshot of `step`.
absl::Status LoadStep(const std::vector<std::string>& servers, int64_t step,
                      Model& model) {
  std::vector<uint64_t> filled(model.params().size(), 0);
  for (const std::string& server : servers) {
    RamTier records;
    // Beside the server's directory: on its file system, not in it.
    const std::string scratch =
        absl::StrCat(server, ".read-", getpid(), "-", step);
    STRATA_RETURN_IF_ERROR(
        LoadSnapshotIn(server, step, records, scratch).status());
    STRATA_RETURN_IF_ERROR(FillFrom(records, model, filled));
  }
  for (size_t i = 0; i < filled.size(); ++i) {
    const TensorSpec& t = model.params()[i].spec;
    if (filled[i] != t.numel()) {
      return absl::DataLossError(
          absl::StrCat("the snapshots of step ", step, " hold ", filled[i],
                       " of ", t.numel(), " values of ", t.name));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> LoadFromSnapshots(const std::string& dir,
                                          Model& model) {
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> servers, ServerDirs(dir));
  // A running server may prune the step between the listing and the read
  // (it keeps its newest few): list again then.
  for (int attempt = 1;; ++attempt) {
    STRATA_ASSIGN_OR_RETURN(const int64_t step, NewestCommonStep(servers));
    absl::Status s = LoadStep(servers, step, model);
    if (s.ok()) return step;
    if (!absl::IsNotFound(s) || attempt == 5) return s;
  }
}

}  // namespace strata
