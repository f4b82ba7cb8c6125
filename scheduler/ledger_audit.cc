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
                      duplicated, "  missing ", missing, "  in_flight ",
                      in_flight, "  last_epoch ", last_epoch, " (",
                      last_epoch_covered, " of ", epoch_samples, ")");
}

absl::StatusOr<LedgerAudit> AuditLedger(
    const std::vector<v1::LedgerRecord>& records) {
  LedgerAudit a;
  using Runs = std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>>;
  Runs runs, in_flight;
  bool first = true;
  for (const v1::LedgerRecord& r : records) {
    if (first) a.epoch_samples = r.epoch_samples();
    first = false;
    if (r.epoch_samples() != a.epoch_samples || r.epoch_samples() <= 0 ||
        r.first() < 0 || r.count() <= 0 ||
        r.first() > r.epoch_samples() - r.count()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ledger record of unit ", r.unit(), " (epoch ", r.data_epoch(), ", [",
          r.first(), ", +", r.count(), ") of ", r.epoch_samples(),
          ") is malformed or disagrees with the others"));
    }
    const int64_t e = static_cast<int64_t>(r.data_epoch());
    if (r.in_flight()) {
      a.in_flight += r.count();
      in_flight[e].emplace_back(r.first(), r.first() + r.count());
      continue;
    }
    ++a.records;
    a.samples += r.count();
    runs[e].emplace_back(r.first(), r.first() + r.count());
  }
  if (runs.empty()) return a;
  a.last_epoch = runs.rbegin()->first;
  // Distinct samples of sorted runs `v`, and the end of their union;
  // `duplicated` gets the overlaps.
  auto cover = [](std::vector<std::pair<int64_t, int64_t>>& v,
                  int64_t* duplicated) {
    std::sort(v.begin(), v.end());
    int64_t covered = 0, end = 0;
    for (const auto& [b, f] : v) {
      if (b < end && duplicated != nullptr) *duplicated += std::min(f, end) - b;
      if (f > end) {
        covered += f - std::max(b, end);
        end = f;
      }
    }
    return std::pair{covered, end};
  };
  for (int64_t e = 0; e <= a.last_epoch; ++e) {
    auto [covered, end] = cover(runs[e], &a.duplicated);
    // What is applied or on its way: holes in it are missing.
    std::vector<std::pair<int64_t, int64_t>> both = runs[e];
    both.insert(both.end(), in_flight[e].begin(), in_flight[e].end());
    const int64_t accounted = cover(both, nullptr).first;
    if (e < a.last_epoch) {
      ++a.epochs_finished;
      a.missing += a.epoch_samples - accounted;
    } else {
      // The last epoch may be cut short, but not have holes.
      a.last_epoch_covered = covered;
      a.missing += std::max<int64_t>(0, end - accounted);
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
  for (v1::LedgerRecord& r : InFlightRecords(state.ledger))
    out.push_back(std::move(r));
  return out;
}

std::vector<v1::LedgerRecord> InFlightRecords(const v1::LedgerState& state) {
  std::vector<v1::LedgerRecord> out;
  const int64_t per_epoch = state.job().samples_per_epoch();
  if (per_epoch <= 0) return out;
  auto add = [&](const v1::WorkUnit& u, int64_t step, uint64_t worker,
                 uint64_t incarnation, uint64_t member) {
    v1::LedgerRecord r;
    r.set_data_epoch(u.data_epoch());
    r.set_unit(u.id());
    r.set_first(u.first() - static_cast<int64_t>(u.data_epoch()) * per_epoch);
    r.set_count(u.count());
    r.set_step(step);
    r.set_worker(worker);
    r.set_incarnation(incarnation);
    r.set_member_id(member);
    r.set_epoch_samples(per_epoch);
    r.set_in_flight(true);
    out.push_back(std::move(r));
  };
  for (const auto& lease : state.leases()) {
    for (const v1::WorkUnit& u : lease.units()) {
      add(u, lease.step(), lease.worker(), lease.incarnation(),
          lease.member_id());
    }
  }
  for (const v1::WorkUnit& u : state.requeued()) add(u, -1, 0, 0, 0);
  return out;
}

absl::StatusOr<int64_t> ReadLedgerAppliedSteps(const std::string& data_dir) {
  STRATA_ASSIGN_OR_RETURN(scheduler_internal::PersistedState state,
                          LoadSchedulerDir(data_dir));
  return state.ledger.applied_steps();
}

}  // namespace strata
