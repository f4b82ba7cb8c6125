#include "scheduler/ledger_audit.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "scheduler/state_store.h"

namespace strata {

std::string LedgerAudit::ToString() const {
  return absl::StrCat("records ", records, "  samples ", samples,
                      "  epochs_finished ", epochs_finished, "  duplicated ",
                      duplicated, "  missing ", missing, "  last_epoch ",
                      last_epoch, " (", last_epoch_covered, " of ",
                      epoch_samples, ")");
}

absl::StatusOr<LedgerAudit> AuditLedger(
    const std::vector<v1::LedgerRecord>& records) {
  LedgerAudit a;
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> runs;
  for (const v1::LedgerRecord& r : records) {
    if (a.records == 0) a.epoch_samples = r.epoch_samples();
    if (r.epoch_samples() != a.epoch_samples || r.epoch_samples() <= 0 ||
        r.first() < 0 || r.count() <= 0 ||
        r.first() > r.epoch_samples() - r.count()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ledger record of unit ", r.unit(), " (epoch ", r.data_epoch(), ", [",
          r.first(), ", +", r.count(), ") of ", r.epoch_samples(),
          ") is malformed or disagrees with the others"));
    }
    ++a.records;
    a.samples += r.count();
    runs[static_cast<int64_t>(r.data_epoch())].emplace_back(
        r.first(), r.first() + r.count());
  }
  if (runs.empty()) return a;
  a.last_epoch = runs.rbegin()->first;
  for (int64_t e = 0; e <= a.last_epoch; ++e) {
    std::vector<std::pair<int64_t, int64_t>>& v = runs[e];
    std::sort(v.begin(), v.end());
    int64_t covered = 0, end = 0;  // distinct samples, end of the union
    for (const auto& [b, f] : v) {
      if (b < end) a.duplicated += std::min(f, end) - b;
      if (f > end) {
        covered += f - std::max(b, end);
        end = f;
      }
    }
    if (e < a.last_epoch) {
      ++a.epochs_finished;
      a.missing += a.epoch_samples - covered;
    } else {
      // The last epoch may be cut short, but not have holes.
      a.last_epoch_covered = covered;
      a.missing += end - covered;
      if (covered == a.epoch_samples) ++a.epochs_finished;
    }
  }
  return a;
}

std::string LedgerRecordJson(const v1::LedgerRecord& r) {
  nlohmann::ordered_json j = {{"epoch", r.data_epoch()},
                              {"unit", r.unit()},
                              {"ranges", {{r.first(), r.first() + r.count()}}},
                              {"step", r.step()},
                              {"worker", r.worker()},
                              {"incarnation", r.incarnation()},
                              {"member", r.member_id()}};
  return j.dump();
}

namespace {

absl::StatusOr<scheduler_internal::PersistedState> LoadSchedulerDir(
    const std::string& data_dir) {
  if (data_dir.empty())
    return absl::InvalidArgumentError("ledger: --dir is empty");
  std::error_code ec;
  if (!std::filesystem::is_directory(data_dir, ec)) {
    // Opening would create a scheduler directory there.
    return absl::NotFoundError(
        absl::StrCat("ledger: ", data_dir, " is not a directory"));
  }
  STRATA_ASSIGN_OR_RETURN(auto store,
                          scheduler_internal::StateStore::Open(data_dir));
  STRATA_ASSIGN_OR_RETURN(scheduler_internal::PersistedState state,
                          store->Load());
  if (state.fresh) {
    return absl::NotFoundError(
        absl::StrCat("ledger: ", data_dir, " holds no scheduler state"));
  }
  return state;
}

}  // namespace

absl::StatusOr<std::vector<v1::LedgerRecord>> ReadLedgerDir(
    const std::string& data_dir) {
  STRATA_ASSIGN_OR_RETURN(scheduler_internal::PersistedState state,
                          LoadSchedulerDir(data_dir));
  std::vector<v1::LedgerRecord> out;
  for (auto& [seq, r] : state.ledger_applied) out.push_back(std::move(r));
  return out;
}

absl::StatusOr<int64_t> ReadLedgerAppliedSteps(const std::string& data_dir) {
  STRATA_ASSIGN_OR_RETURN(scheduler_internal::PersistedState state,
                          LoadSchedulerDir(data_dir));
  return state.ledger.applied_steps();
}

}  // namespace strata
