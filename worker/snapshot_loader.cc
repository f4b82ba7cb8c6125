#include "worker/snapshot_loader.h"

#include <algorithm>
#include <filesystem>
#include <memory>
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

absl::StatusOr<int64_t> LoadFromSnapshots(const std::string& dir,
                                          Model& model) {
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
  // The newest step of which every server holds a snapshot.
  std::vector<int64_t> common;
  for (size_t s = 0; s < servers.size(); ++s) {
    STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> steps,
                            servers[s]->ListSnapshots());
    if (steps.empty()) {
      return absl::NotFoundError(
          absl::StrCat(servers[s]->path(), " holds no snapshot"));
    }
    if (s == 0) {
      common = steps;
    } else {
      std::vector<int64_t> both;
      std::set_intersection(common.begin(), common.end(), steps.begin(),
                            steps.end(), std::back_inserter(both));
      common = std::move(both);
    }
  }
  if (common.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the servers under ", dir, " hold no snapshot of one same step"));
  }
  const int64_t step = common.back();
  std::vector<uint64_t> filled(model.params().size(), 0);
  for (const auto& server : servers) {
    RamTier records;
    STRATA_RETURN_IF_ERROR(server->LoadSnapshot(step, records).status());
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
  return step;
}

}  // namespace strata
