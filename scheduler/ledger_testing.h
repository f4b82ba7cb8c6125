// What the ledger's tests share: views, jobs, requests and a fixture over
// a StateStore in memory or on disk.
#ifndef STRATA_SCHEDULER_LEDGER_TESTING_H_
#define STRATA_SCHEDULER_LEDGER_TESTING_H_

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/ledger.h"
#include "scheduler/state_store.h"
#include "testing/temp_dir.h"

namespace strata::scheduler_internal {

inline constexpr uint64_t kServer0 = 100, kServer1 = 101;

// A view with live workers `ids` (speeds in samples/s, 0: unknown) and
// servers kServer0/kServer1 in slots 0 and 1.
inline v1::View MakeView(uint64_t workers_epoch,
                         const std::vector<uint64_t>& ids,
                         const std::vector<double>& speeds = {}) {
  v1::View v;
  v.set_epoch(workers_epoch + 1);
  v.set_workers_epoch(workers_epoch);
  for (size_t i = 0; i < ids.size(); ++i) {
    v1::Member* m = v.add_workers();
    m->set_id(ids[i]);
    m->set_role(v1::ROLE_WORKER);
    m->set_worker(ids[i]);
    m->set_incarnation(1);
    if (i < speeds.size()) m->set_samples_per_sec(speeds[i]);
  }
  for (auto [slot, id] : {std::pair{0, kServer0}, {1, kServer1}}) {
    v1::ShardSlot* s = v.mutable_shard_map()->add_slots();
    s->set_shard(slot);
    s->set_member_id(id);
  }
  return v;
}

inline v1::LedgerJob Job(int64_t batch = 10, int64_t per_epoch = 25) {
  v1::LedgerJob j;
  j.set_batch(batch);
  j.set_samples_per_epoch(per_epoch);
  j.set_seed(7);
  j.add_slots(0);
  j.add_slots(1);
  return j;
}

inline v1::LeaseWorkRequest LeaseReq(uint64_t member, int64_t step,
                                     v1::LedgerJob job = Job()) {
  v1::LeaseWorkRequest r;
  r.set_member_id(member);
  r.set_step(step);
  *r.mutable_job() = job;
  return r;
}

inline v1::ReportAppliedRequest ReportReq(uint64_t server, int slot,
                                          int64_t step, uint64_t epoch,
                                          uint64_t worker = 0) {
  v1::ReportAppliedRequest r;
  r.set_member_id(server);
  v1::AppliedReport* a = r.add_reports();
  a->set_slot(slot);
  a->set_step(step);
  a->set_epoch(epoch);
  a->set_worker_member_id(worker);
  return r;
}

// Both slots report.
inline void ReportBoth(Ledger& l, const v1::View& v, int64_t step,
                       uint64_t epoch, uint64_t worker = 0) {
  ASSERT_TRUE(l.Report(ReportReq(kServer0, 0, step, epoch, worker), v).ok());
  ASSERT_TRUE(l.Report(ReportReq(kServer1, 1, step, epoch, worker), v).ok());
}

// (first, count) of each unit.
inline std::vector<std::pair<int64_t, int64_t>> Runs(
    const google::protobuf::RepeatedPtrField<v1::WorkUnit>& units) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& u : units) out.emplace_back(u.first(), u.count());
  return out;
}

// Every sample number each record covers, counted (global numbering).
inline std::map<int64_t, int> Coverage(
    const std::vector<v1::LedgerRecord>& records, int64_t per_epoch) {
  std::map<int64_t, int> seen;
  for (const auto& r : records) {
    for (int64_t i = 0; i < r.count(); ++i)
      ++seen[static_cast<int64_t>(r.data_epoch()) * per_epoch + r.first() + i];
  }
  return seen;
}

class LedgerTest : public ::testing::Test {
 protected:
  void Open(const std::string& mode = "bsp", bool on_disk = false) {
    ledger_.reset();
    store_.reset();
    std::string dir;
    if (on_disk) {
      dir = strata::testing::TestRoot() + "/ledger";  // kept across Opens
    }
    auto store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto state = store_->Load();
    ASSERT_TRUE(state.ok()) << state.status();
    ledger_ = std::make_unique<Ledger>(*ParseConsistency(mode), store_.get(),
                                       state->ledger, state->ledger_applied,
                                       state->ledger_splits);
  }
  void TearDown() override {
    ledger_.reset();
    store_.reset();
    std::filesystem::remove_all(strata::testing::TestRoot() + "/ledger");
  }

  std::unique_ptr<StateStore> store_;
  std::unique_ptr<Ledger> ledger_;
};

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_LEDGER_TESTING_H_
