#include "model/snapshot_loader.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
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

namespace {

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

// Removes the scratch folders (<server>.read-<pid>-<step>) that readers
// which died mid-read left beside `servers`: their links pin the disk space
// of snapshots the servers have pruned.
void SweepDeadReaders(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.find(".read-");
    if (name.rfind("server-", 0) != 0 || at == std::string::npos) continue;
    const int pid = std::atoi(name.c_str() + at + 6);
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {
      std::filesystem::remove_all(e.path(), ec);
    }
  }
}

}  // namespace

absl::StatusOr<int64_t> LoadFromSnapshots(const std::string& dir,
                                          Model& model) {
  STRATA_ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> slots,
                          ServerDirsBySlot(dir));
  SweepDeadReaders(dir);
  for (int r = 1; std::filesystem::exists(absl::StrCat(dir, "/replica-", r));
       ++r) {
    SweepDeadReaders(absl::StrCat(dir, "/replica-", r));
  }
  // A running server may prune the step between the listing and the read
  // (it keeps its newest few): list again then.
  for (int attempt = 1;; ++attempt) {
    // The steps a slot holds: those of any of its replicas (one that died
    // early holds only older ones).
    std::vector<std::string> names;
    std::vector<std::vector<std::vector<int64_t>>> held(slots.size());
    std::vector<std::vector<int64_t>> steps;
    for (size_t s = 0; s < slots.size(); ++s) {
      names.push_back(slots[s].front());
      steps.emplace_back();
      for (const std::string& replica : slots[s]) {
        STRATA_ASSIGN_OR_RETURN(held[s].emplace_back(),
                                ListSnapshotsIn(replica));
        steps.back().insert(steps.back().end(), held[s].back().begin(),
                            held[s].back().end());
      }
      std::sort(steps.back().begin(), steps.back().end());
      steps.back().erase(std::unique(steps.back().begin(), steps.back().end()),
                         steps.back().end());
    }
    STRATA_ASSIGN_OR_RETURN(const int64_t step, NewestCommonStep(names, steps));
    // Each slot read from a replica that holds the step.
    std::vector<std::string> servers;
    for (size_t s = 0; s < slots.size(); ++s) {
      for (size_t r = 0; r < slots[s].size(); ++r) {
        if (std::find(held[s][r].begin(), held[s][r].end(), step) !=
            held[s][r].end()) {
          servers.push_back(slots[s][r]);
          break;
        }
      }
    }
    absl::Status s = LoadStep(servers, step, model);
    if (s.ok()) return step;
    if (!absl::IsNotFound(s) || attempt == 5) return s;
  }
}

}  // namespace strata
