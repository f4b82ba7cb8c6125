#include "worker/snapshot_loader.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "storage/data_dir.h"
#include "storage/ram_tier.h"
#include "storage/server_dirs.h"
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
  STRATA_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<DataDir>> servers,
                          OpenServerDirs(dir));
  STRATA_ASSIGN_OR_RETURN(const int64_t step, NewestCommonSnapshot(servers));
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
