#include "scheduler/ledger.h"

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/ledger_audit.h"
#include "scheduler/ledger_testing.h"
#include "testing/temp_dir.h"

namespace strata::scheduler_internal {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Apportion, FollowsWeightsGivesEachOneAndSumsToTotal) {
  EXPECT_THAT(Apportion(10, {1, 1, 1}), ElementsAre(4, 3, 3));
  EXPECT_THAT(Apportion(48, {100, 50}), ElementsAre(32, 16));
  EXPECT_THAT(Apportion(5, {1000, 1}), ElementsAre(4, 1));
  // Unknown (0), negative or NaN speeds: equal shares.
  EXPECT_THAT(Apportion(6, {3, 0}), ElementsAre(3, 3));
  EXPECT_THAT(Apportion(6, {3, std::nan("")}), ElementsAre(3, 3));
  EXPECT_THAT(Apportion(3, {1, 1, 1}), ElementsAre(1, 1, 1));
}

TEST_F(LedgerTest, BspSplitsAStepsSamplesOnceForEveryWorkerOfTheEpoch) {
  Open();
  const v1::View v = MakeView(3, {5, 9});
  auto a = ledger_->Lease(LeaseReq(9, 3), v);
  auto b = ledger_->Lease(LeaseReq(5, 3), v);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(b->rank(), 0);
  EXPECT_EQ(a->rank(), 1);
  EXPECT_EQ(a->workers(), 2);
  EXPECT_EQ(a->epoch(), 3u);
  EXPECT_THAT(Runs(b->units()), ElementsAre(std::pair{30, 5}));
  EXPECT_THAT(Runs(a->units()), ElementsAre(std::pair{35, 5}));
  // Asking again gives the same units.
  auto again = ledger_->Lease(LeaseReq(9, 3), v);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->units(0).id(), a->units(0).id());
  // Step 2 covers [20, 30), which the data epoch ends inside (25 per epoch).
  auto c = ledger_->Lease(LeaseReq(9, 2), v);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(Runs(c->units()), ElementsAre(std::pair{25, 5}));
  auto d = ledger_->Lease(LeaseReq(5, 2), v);
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(Runs(d->units()), ElementsAre(std::pair{20, 5}));
  EXPECT_EQ(c->units(0).data_epoch(), 1u);
  EXPECT_EQ(d->units(0).data_epoch(), 0u);
}

TEST_F(LedgerTest, BspSharesFollowSpeed) {
  Open();
  auto r = ledger_->Lease(LeaseReq(1, 0, Job(48, 1000)),
                          MakeView(1, {1, 2}, {100.0, 50.0}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->units(0).count(), 32);
  // A worker 100x faster counts as twice the median: half the batch.
  auto capped = ledger_->Lease(LeaseReq(1, 1, Job(48, 1000)),
                               MakeView(2, {1, 2, 3}, {10000.0, 100.0, 100.0}));
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->units(0).count(), 24);
}

TEST_F(LedgerTest, BspStepRedoneInANewEpochIsRecordedOnceFromItsLastSplit) {
  Open();
  const v1::View old_view = MakeView(3, {5, 9});
  ASSERT_TRUE(ledger_->Lease(LeaseReq(5, 0), old_view).ok());
  ASSERT_TRUE(ledger_->Lease(LeaseReq(9, 0), old_view).ok());
  // Worker 9 dies; 5 redoes step 0 alone in workers epoch 4.
  const v1::View v = MakeView(4, {5});
  auto redo = ledger_->Lease(LeaseReq(5, 0), v);
  ASSERT_TRUE(redo.ok());
  EXPECT_THAT(Runs(redo->units()), ElementsAre(std::pair{0, 10}));
  ReportBoth(*ledger_, v, 0, 4);
  const auto records = ledger_->Applied();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].worker(), 5u);
  EXPECT_EQ(records[0].step(), 0);
  EXPECT_EQ(records[0].count(), 10);
  EXPECT_EQ(ledger_->State().applied_steps(), 1);
  // The applied step is not leased again; its late duplicate is ignored.
  auto late = ledger_->Lease(LeaseReq(5, 0), v);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kOutOfRange);
  auto dup = ledger_->Report(ReportReq(kServer0, 0, 0, 4), v);
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->ignored(), 1u);
  EXPECT_EQ(ledger_->Applied().size(), 1u);
}

TEST_F(LedgerTest, AStepIsAppliedOnlyWhenEverySlotReported) {
  Open();
  const v1::View v = MakeView(1, {1});
  ASSERT_TRUE(ledger_->Lease(LeaseReq(1, 0), v).ok());
  ASSERT_TRUE(ledger_->Report(ReportReq(kServer0, 0, 0, 1), v).ok());
  // The same slot again changes nothing.
  auto dup = ledger_->Report(ReportReq(kServer0, 0, 0, 1), v);
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->ignored(), 1u);
  EXPECT_TRUE(ledger_->Applied().empty());
  ASSERT_TRUE(ledger_->Report(ReportReq(kServer1, 1, 0, 1), v).ok());
  EXPECT_EQ(ledger_->Applied().size(), 1u);
}

// A slot's reports held back (a scheduler outage) complete steps 1 and 2
// before step 0: each is recorded from its own split, applied_steps moves
// only over applied runs, and a step applied ahead is applied (its lease
// OUT_OF_RANGE, its reports duplicates). A rollback forgets those ahead.
TEST_F(LedgerTest, BspStepsAppliedOutOfOrderAreEachRecordedOnce) {
  Open("bsp", /*on_disk=*/true);
  const v1::View v = MakeView(3, {5});
  v1::LeaseWorkRequest req = LeaseReq(5, 0);
  req.set_ahead(3);  // steps 0..3
  ASSERT_TRUE(ledger_->Lease(req, v).ok());
  ReportBoth(*ledger_, v, 2, 3);
  ReportBoth(*ledger_, v, 1, 3);
  EXPECT_EQ(ledger_->State().applied_steps(), 0);
  EXPECT_THAT(ledger_->State().closed_ahead(), ElementsAre(1, 2));
  EXPECT_EQ(ledger_->Lease(LeaseReq(5, 2), v).status().code(),
            absl::StatusCode::kOutOfRange);
  auto dup = ledger_->Report(ReportReq(kServer0, 0, 1, 3), v);
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->ignored(), 1u);
  Open("bsp", /*on_disk=*/true);  // kept across a restart
  ReportBoth(*ledger_, v, 0, 3);
  EXPECT_EQ(ledger_->State().applied_steps(), 3);
  EXPECT_TRUE(ledger_->State().closed_ahead().empty());
  auto audit = AuditLedger(ledger_->Applied());
  ASSERT_TRUE(audit.ok()) << audit.status();
  EXPECT_EQ(audit->samples, 30);
  EXPECT_TRUE(audit->exactly_once());
  // Step 5 applied ahead of step 4, then a rollback to step 4: forgotten
  // with it.
  ASSERT_TRUE(ledger_->Lease(LeaseReq(5, 5), v).ok());
  ReportBoth(*ledger_, v, 5, 3);
  EXPECT_THAT(ledger_->State().closed_ahead(), ElementsAre(5));
  ASSERT_TRUE(ledger_->RollBack(4).ok());
  EXPECT_EQ(ledger_->State().applied_steps(), 3);
  EXPECT_TRUE(ledger_->State().closed_ahead().empty());
}

TEST_F(LedgerTest, RefusesReportsFromNonOwnersAndForeignSlots) {
  Open();
  const v1::View v = MakeView(1, {1});
  EXPECT_EQ(ledger_->Report(ReportReq(kServer0, 0, 0, 1), v).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no job yet
  ASSERT_TRUE(ledger_->Lease(LeaseReq(1, 0), v).ok());
  auto wrong = ledger_->Report(ReportReq(kServer1, 0, 0, 1), v);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied);
  auto worker = ledger_->Report(ReportReq(1, 0, 0, 1), v);
  EXPECT_EQ(worker.status().code(), absl::StatusCode::kPermissionDenied);
  auto foreign = ledger_->Report(ReportReq(kServer0, 7, 0, 1), v);
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ledger_->State().pending().empty());
}

TEST_F(LedgerTest, RefusesNonMembersOtherJobsAndBadRequests) {
  Open();
  const v1::View v = MakeView(1, {1});
  EXPECT_EQ(ledger_->Lease(LeaseReq(2, 0), v).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(ledger_->Lease(LeaseReq(1, 0), v).ok());
  v1::LedgerJob other = Job();
  other.set_seed(8);
  auto r = ledger_->Lease(LeaseReq(1, 1, other), v);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("another job"));
  EXPECT_EQ(ledger_->Lease(LeaseReq(1, -1), v).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger_->Lease(LeaseReq(1, int64_t{1} << 62), v).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::LedgerJob unsorted = Job();
  unsorted.clear_slots();
  unsorted.add_slots(1);
  unsorted.add_slots(0);
  EXPECT_EQ(ledger_->Lease(LeaseReq(1, 1, unsorted), v).status().code(),
            absl::StatusCode::kInvalidArgument);
  // More live workers than samples per step.
  EXPECT_EQ(ledger_
                ->Lease(LeaseReq(1, 1, Job()),
                        MakeView(2, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(LedgerTest, AsyncLeasesOfADeadWorkerGoBackToTheFrontOfTheQueue) {
  Open("asp");
  v1::View v = MakeView(1, {1, 2});
  auto a = ledger_->Lease(LeaseReq(1, 0), v);  // [0, 5)
  auto b = ledger_->Lease(LeaseReq(2, 0), v);  // [5, 10)
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_THAT(Runs(a->units()), ElementsAre(std::pair{0, 5}));
  EXPECT_THAT(Runs(b->units()), ElementsAre(std::pair{5, 5}));
  ReportBoth(*ledger_, v, 0, 0, 1);
  // Worker 2 dies with [5, 10) leased; worker 3 joins.
  v = MakeView(2, {1, 3});
  ASSERT_TRUE(ledger_->Sweep(v).ok());
  EXPECT_EQ(ledger_->State().requeued_size(), 1);
  auto c = ledger_->Lease(LeaseReq(3, 0), v);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(Runs(c->units()), ElementsAre(std::pair{5, 5}));
  EXPECT_EQ(c->units(0).id(), b->units(0).id());  // the same unit
  auto d = ledger_->Lease(LeaseReq(1, 1), v);
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(Runs(d->units()), ElementsAre(std::pair{10, 5}));
  ReportBoth(*ledger_, v, 0, 0, 3);
  ReportBoth(*ledger_, v, 1, 0, 1);
  const auto seen = Coverage(ledger_->Applied(), 25);
  EXPECT_EQ(seen.size(), 15u);
  for (const auto& [sample, n] : seen) EXPECT_EQ(n, 1) << sample;
}

TEST_F(LedgerTest, AsyncRequeuedUnitsAreCutToTheAskersShare) {
  Open("ssp:1");
  v1::View v = MakeView(1, {1});
  ASSERT_TRUE(ledger_->Lease(LeaseReq(1, 0), v).ok());  // [0, 10)
  v = MakeView(2, {2, 3});
  ASSERT_TRUE(ledger_->Sweep(v).ok());
  auto a = ledger_->Lease(LeaseReq(2, 0), v);
  auto b = ledger_->Lease(LeaseReq(3, 0), v);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_THAT(Runs(a->units()), ElementsAre(std::pair{0, 5}));
  EXPECT_THAT(Runs(b->units()), ElementsAre(std::pair{5, 5}));
  EXPECT_EQ(ledger_->State().requeued_size(), 0);
  EXPECT_EQ(ledger_->State().cursor(), 10);
}

TEST_F(LedgerTest, AsyncPushAppliedAfterItsLeaseWasHandedBack) {
  Open("asp");
  v1::View v = MakeView(1, {1, 2});
  ASSERT_TRUE(ledger_->Lease(LeaseReq(1, 0), v).ok());  // [0, 5)
  ASSERT_TRUE(ledger_->Lease(LeaseReq(2, 0), v).ok());  // [5, 10)
  v = MakeView(2, {2});
  ASSERT_TRUE(ledger_->Sweep(v).ok());  // 1's units are queued again
  // 1's push lands on both servers before anyone took them: recorded once,
  // taken off the queue.
  v1::View old_v = MakeView(1, {1, 2});
  ReportBoth(*ledger_, old_v, 0, 0, 1);
  EXPECT_EQ(ledger_->State().requeued_size(), 0);
  EXPECT_EQ(ledger_->State().late(), 0u);
  ASSERT_EQ(ledger_->Applied().size(), 1u);
  EXPECT_EQ(ledger_->Applied()[0].member_id(), 1u);

  // Worker 2 dies too; its units are handed to 3 before its push lands.
  v = MakeView(3, {3});
  ASSERT_TRUE(ledger_->Sweep(v).ok());
  auto c = ledger_->Lease(LeaseReq(3, 0), v);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(Runs(c->units()), ElementsAre(std::pair{5, 5}, std::pair{10, 5}));
  ReportBoth(*ledger_, old_v, 0, 0, 2);
  EXPECT_EQ(ledger_->State().late(), 1u);
  EXPECT_EQ(ledger_->Applied().size(), 1u);
}

// A worker that leased hundreds of clocks ahead leaves: its clock 0 push,
// which may be in flight, is still matched when it lands (only its lowest
// clocks are kept as orphans, so 300 leases ahead do not push it out), and
// its samples are taken back off the queue, not handed out twice.
TEST_F(LedgerTest, AsyncPushOfAWorkerThatLeasedFarAheadStillCounts) {
  Open("asp");
  const v1::View v = MakeView(1, {1, 2});
  v1::LeaseWorkRequest req = LeaseReq(1, 0);
  req.set_ahead(300);
  auto a = ledger_->Lease(req, v);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->leased_ahead_size(), 300);
  ASSERT_TRUE(ledger_->Sweep(MakeView(2, {2})).ok());
  EXPECT_LE(ledger_->State().orphans_size(), 4);
  ReportBoth(*ledger_, v, 0, 0, 1);
  ASSERT_EQ(ledger_->Applied().size(), 1u);
  EXPECT_EQ(ledger_->Applied()[0].first(), 0);
  // Worker 2 now gets the samples after clock 0's, never [0, 5) again.
  auto b = ledger_->Lease(LeaseReq(2, 0), MakeView(2, {2}));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GE(b->units(0).first(), 5);
}

TEST_F(LedgerTest, PersistsAndContinuesAtTheSameCursor) {
  Open("asp", /*on_disk=*/true);
  v1::View v = MakeView(1, {1, 2});
  ASSERT_TRUE(ledger_->Lease(LeaseReq(1, 0), v).ok());
  ASSERT_TRUE(ledger_->Lease(LeaseReq(2, 0), v).ok());
  ReportBoth(*ledger_, v, 0, 0, 1);
  const v1::LedgerState before = ledger_->State();
  Open("asp", /*on_disk=*/true);  // a restarted scheduler
  EXPECT_EQ(ledger_->State().SerializeAsString(), before.SerializeAsString());
  ASSERT_EQ(ledger_->Applied().size(), 1u);
  auto next = ledger_->Lease(LeaseReq(1, 1), v);
  ASSERT_TRUE(next.ok());
  EXPECT_THAT(Runs(next->units()), ElementsAre(std::pair{10, 5}));
  // Worker 2's lease survived the restart and completes.
  ReportBoth(*ledger_, v, 0, 0, 2);
  EXPECT_EQ(ledger_->Applied().size(), 2u);
}

TEST_F(LedgerTest, RollBackForgetsLaterStepsAndSplitsThemAgain) {
  Open("bsp", /*on_disk=*/true);
  const v1::View v = MakeView(1, {1});
  for (int64_t step = 0; step < 4; ++step) {
    ASSERT_TRUE(ledger_->Lease(LeaseReq(1, step), v).ok());
    ReportBoth(*ledger_, v, step, 1);
  }
  ASSERT_EQ(ledger_->Applied().size(), 5u);  // step 2 is cut at 25
  ASSERT_TRUE(ledger_->RollBack(2).ok());
  EXPECT_EQ(ledger_->Applied().size(), 2u);
  EXPECT_EQ(ledger_->State().applied_steps(), 2);
  Open("bsp", /*on_disk=*/true);
  EXPECT_EQ(ledger_->Applied().size(), 2u);  // the deletion was stored
  for (int64_t step = 2; step < 4; ++step) {
    ASSERT_TRUE(ledger_->Lease(LeaseReq(1, step), v).ok());
    ReportBoth(*ledger_, v, step, 1);
  }
  const auto seen = Coverage(ledger_->Applied(), 25);
  EXPECT_EQ(seen.size(), 40u);
  for (const auto& [sample, n] : seen) EXPECT_EQ(n, 1) << sample;
}

TEST_F(LedgerTest, AsyncJobEndsOnceEverySampleIsApplied) {
  Open("asp");
  v1::LedgerJob job = Job();
  job.set_total_samples(15);
  const v1::View v = MakeView(1, {1, 2});
  auto a = ledger_->Lease(LeaseReq(1, 0, job), v);  // [0, 5)
  auto b = ledger_->Lease(LeaseReq(2, 0, job), v);  // [5, 10)
  auto c = ledger_->Lease(LeaseReq(1, 1, job), v);  // [10, 15)
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_THAT(Runs(c->units()), ElementsAre(std::pair{10, 5}));
  EXPECT_FALSE(ledger_->Drained(1));
  // Everything is out, not all applied: ask again later. Worker 1 is
  // drained (SSP does not wait for it); worker 2, which has not asked, is
  // not.
  EXPECT_EQ(ledger_->Lease(LeaseReq(1, 2, job), v).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(ledger_->Drained(1));
  EXPECT_FALSE(ledger_->Drained(2));
  ReportBoth(*ledger_, v, 0, 0, 1);
  ReportBoth(*ledger_, v, 1, 0, 1);
  // Worker 2 dies: its units come back, and worker 1 takes them.
  const v1::View after = MakeView(2, {1});
  ASSERT_TRUE(ledger_->Sweep(after).ok());
  auto d = ledger_->Lease(LeaseReq(1, 2, job), after);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(Runs(d->units()), ElementsAre(std::pair{5, 5}));
  EXPECT_FALSE(ledger_->Drained(1));  // it has samples to push again
  ReportBoth(*ledger_, after, 2, 0, 1);
  EXPECT_EQ(ledger_->Lease(LeaseReq(1, 3, job), after).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(ledger_->Drained(1));
  auto audit = AuditLedger(ledger_->Applied());
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ(audit->samples, 15);
  EXPECT_TRUE(audit->exactly_once());
}

// Steps leased ahead are the leases those steps get when asked alone: the
// same split for every worker of the epoch, stored (a restarted scheduler
// answers them the same), no step past the job's end.
TEST_F(LedgerTest, BspStepsLeasedAheadAreTheStepsOwnSplits) {
  Open("bsp", /*on_disk=*/true);
  v1::LedgerJob job = Job();
  job.set_total_samples(60);  // steps 0..5
  const v1::View v = MakeView(3, {5, 9});
  v1::LeaseWorkRequest req = LeaseReq(9, 0, job);
  req.set_ahead(10);
  auto a = ledger_->Lease(req, v);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->step(), 0);
  ASSERT_EQ(a->leased_ahead_size(), 5);  // steps 1..5: the job ends there
  for (int i = 0; i < 5; ++i) {
    const v1::LeaseWorkResponse& ahead = a->leased_ahead(i);
    EXPECT_EQ(ahead.step(), 1 + i);
    EXPECT_EQ(ahead.epoch(), 3u);
    EXPECT_EQ(ahead.rank(), 1);
    EXPECT_EQ(ahead.workers(), 2);
    EXPECT_TRUE(ahead.leased_ahead().empty());
  }
  EXPECT_THAT(Runs(a->leased_ahead(3).units()), ElementsAre(std::pair{45, 5}));
  // Past the job's end (a top-up at its last step): no split is made.
  EXPECT_EQ(ledger_->Lease(LeaseReq(9, 6, job), v).status().code(),
            absl::StatusCode::kOutOfRange);
  // The other worker, asking step 4 alone (after a restart), gets the other
  // half of the same split; worker 9 asking again gets the same units.
  Open("bsp", /*on_disk=*/true);
  auto b = ledger_->Lease(LeaseReq(5, 4, job), v);
  auto again = ledger_->Lease(LeaseReq(9, 4, job), v);
  ASSERT_TRUE(b.ok() && again.ok());
  EXPECT_THAT(Runs(b->units()), ElementsAre(std::pair{40, 5}));
  EXPECT_EQ(again->units(0).id(), a->leased_ahead(3).units(0).id());
  // Recorded once each, whoever leased them.
  for (int64_t step = 0; step < 6; ++step) ReportBoth(*ledger_, v, step, 3);
  auto audit = AuditLedger(ledger_->Applied());
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ(audit->samples, 60);
  EXPECT_TRUE(audit->exactly_once());
}

// An older scheduler kept the BSP splits inside the state record: they are
// used as they are, and the first commit stores them under their own keys.
TEST_F(LedgerTest, SplitsOfAnOlderStateRecordMoveUnderTheirOwnKeys) {
  Open("bsp", /*on_disk=*/true);
  const v1::View v = MakeView(3, {5, 9});
  auto made = ledger_->Lease(LeaseReq(9, 0), v);
  ASSERT_TRUE(made.ok()) << made.status();
  // The older layout: the split inside the state, none under its key.
  v1::LedgerState legacy = ledger_->State();
  v1::LedgerState::Split* split = legacy.add_splits();
  split->set_step(0);
  split->set_epoch(3);
  for (uint64_t m : {5u, 9u}) {
    v1::LedgerState::Share* share = split->add_shares();
    share->set_member_id(m);
    share->set_worker(m);
    share->set_incarnation(1);
    v1::WorkUnit* u = share->add_units();
    u->set_id(700 + m);
    u->set_first(m == 5 ? 0 : 5);
    u->set_count(5);
  }
  StateBatch batch;
  batch.PutLedgerState(legacy);
  batch.DeleteLedgerSplit(0, 3);
  ASSERT_TRUE(store_->Write(batch).ok());
  Open("bsp", /*on_disk=*/true);
  auto old = ledger_->Lease(LeaseReq(9, 0), v);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->units(0).id(), 709u);
  // That lease committed: the split is under its key now.
  Open("bsp", /*on_disk=*/true);
  auto kept = ledger_->Lease(LeaseReq(5, 0), v);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->units(0).id(), 705u);
  EXPECT_EQ(ledger_->State().splits_size(), 0);  // none inside the state
}

// SSP/ASP: a worker leases ahead at most half its even part of what is left,
// so the other worker still finds samples, and none is handed out twice.
TEST_F(LedgerTest, AsyncLeasesAheadLeaveOtherWorkersTheirPart) {
  Open("ssp:1");
  v1::LedgerJob job = Job(10, 1000);
  job.set_total_samples(200);
  const v1::View v = MakeView(1, {1, 2});
  v1::LeaseWorkRequest req = LeaseReq(1, 0, job);
  req.set_ahead(100);
  auto a = ledger_->Lease(req, v);
  ASSERT_TRUE(a.ok()) << a.status();
  // 195 left after its own 5: at most 195 / 4 = 48 samples ahead, 9 leases.
  EXPECT_EQ(a->leased_ahead_size(), 9);
  std::map<int64_t, int> seen;
  auto note = [&](const v1::LeaseWorkResponse& r) {
    for (const v1::WorkUnit& u : r.units())
      for (int64_t i = 0; i < u.count(); ++i) ++seen[u.first() + i];
  };
  note(*a);
  for (const auto& ahead : a->leased_ahead()) note(ahead);
  // The other worker leases the rest, step by step, up to the end.
  int64_t clock = 0;
  for (;;) {
    auto b = ledger_->Lease(LeaseReq(2, clock++, job), v);
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
      break;
    }
    note(*b);
  }
  EXPECT_EQ(seen.size(), 200u);
  for (const auto& [sample, n] : seen) EXPECT_EQ(n, 1) << sample;
}

v1::LedgerRecord Rec(uint64_t epoch, int64_t first, int64_t count) {
  v1::LedgerRecord r;
  r.set_data_epoch(epoch);
  r.set_first(first);
  r.set_count(count);
  r.set_epoch_samples(10);
  return r;
}

TEST(AuditLedger, CountsDuplicatesAndGapsOfFinishedEpochs) {
  auto ok = AuditLedger({Rec(0, 5, 5), Rec(0, 0, 5), Rec(1, 0, 3)});
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->exactly_once());
  EXPECT_EQ(ok->epochs_finished, 1);
  EXPECT_EQ(ok->last_epoch_covered, 3);
  auto dup = AuditLedger({Rec(0, 0, 6), Rec(0, 4, 6), Rec(1, 0, 1)});
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->duplicated, 2);
  EXPECT_EQ(dup->missing, 0);
  auto gap = AuditLedger({Rec(0, 0, 4), Rec(0, 6, 4), Rec(2, 0, 1)});
  ASSERT_TRUE(gap.ok());
  EXPECT_EQ(gap->missing, 2 + 10);  // epoch 1 has no record at all
  auto hole = AuditLedger({Rec(0, 0, 2), Rec(0, 5, 1)});  // the last epoch
  ASSERT_TRUE(hole.ok());
  EXPECT_EQ(hole->missing, 3);
  EXPECT_FALSE(gap->exactly_once());
  // Samples leased or queued, not yet applied (a job under way, with leases
  // ahead), are not missing; the holes beside them are.
  v1::LedgerRecord leased = Rec(1, 0, 10), queued = Rec(0, 4, 1);
  leased.set_in_flight(true);
  queued.set_in_flight(true);
  auto live =
      AuditLedger({Rec(0, 0, 4), Rec(0, 6, 4), Rec(2, 0, 1), leased, queued});
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->missing, 1);  // sample 5 of epoch 0
  EXPECT_EQ(live->in_flight, 11);
  EXPECT_EQ(live->samples, 9);
  // A record outside its epoch, or disagreeing on the epoch size.
  EXPECT_FALSE(AuditLedger({Rec(0, 8, 5)}).ok());
  v1::LedgerRecord other = Rec(0, 0, 1);
  other.set_epoch_samples(11);
  EXPECT_FALSE(AuditLedger({Rec(0, 1, 1), other}).ok());
  EXPECT_EQ(LedgerRecordJson(Rec(1, 2, 3))
                .rfind("{\"epoch\":1,\"unit\":0,"
                       "\"ranges\":[[2,5]],",
                       0),
            0u);
}

}  // namespace
}  // namespace strata::scheduler_internal
