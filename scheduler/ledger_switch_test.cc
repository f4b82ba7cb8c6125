// The ledger's live consistency switch (scheduler/ledger.h BeginSwitch).
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/ledger.h"
#include "scheduler/ledger_audit.h"
#include "scheduler/ledger_testing.h"

namespace strata::scheduler_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// BSP to SSP: the fence is the first step no worker holds a lease of
// (leases ahead included); nothing from it on is leased until the steps
// before it are applied; then SSP leases start at the fence's first sample,
// and every sample is applied once across the switch. A restarted ledger
// goes on in SSP.
TEST_F(LedgerTest, BspSwitchesToSspAtTheFirstStepNotLeased) {
  Open("bsp", /*on_disk=*/true);
  const v1::View v = MakeView(3, {5, 9});
  v1::LeaseWorkRequest ahead = LeaseReq(9, 0);
  ahead.set_ahead(2);  // steps 0, 1, 2
  ASSERT_TRUE(ledger_->Lease(ahead, v).ok());
  ASSERT_TRUE(ledger_->Lease(LeaseReq(5, 0), v).ok());
  auto sw = ledger_->BeginSwitch(*ParseConsistency("ssp:2"), "jitter", 1);
  ASSERT_TRUE(sw.ok()) << sw.status();
  EXPECT_EQ(sw->step(), 3);
  EXPECT_EQ(sw->from(), "bsp");
  EXPECT_EQ(sw->to(), "ssp:2");
  EXPECT_EQ(ledger_->mode().ToString(), "bsp");
  // Steps before the fence are still BSP's; the fence is not leased.
  auto before = ledger_->Lease(LeaseReq(5, 2), v);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_THAT(Runs(before->units()), ElementsAre(std::pair{20, 5}));
  const absl::Status fenced = ledger_->Lease(LeaseReq(5, 3), v).status();
  EXPECT_EQ(fenced.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(fenced.message(), HasSubstr("switches to ssp:2 at step 3"));
  EXPECT_EQ(
      ledger_->BeginSwitch(*ParseConsistency("asp"), "", 2).status().code(),
      absl::StatusCode::kFailedPrecondition);
  // Not before every step before the fence is applied.
  ReportBoth(*ledger_, v, 0, 3);
  ReportBoth(*ledger_, v, 1, 3);
  auto early = ledger_->MaybeCompleteSwitch();
  ASSERT_TRUE(early.ok());
  EXPECT_FALSE(early->has_value());
  ReportBoth(*ledger_, v, 2, 3);
  auto done = ledger_->MaybeCompleteSwitch();
  ASSERT_TRUE(done.ok() && done->has_value()) << done.status();
  EXPECT_EQ((*done)->step(), 3);
  EXPECT_EQ(ledger_->mode().ToString(), "ssp:2");
  // The same mode after a restart.
  Open("bsp", /*on_disk=*/true);
  EXPECT_EQ(ledger_->mode().ToString(), "ssp:2");
  EXPECT_EQ(ledger_->State().switches_size(), 1);
  EXPECT_FALSE(ledger_->State().has_pending_switch());
  // Clock 3 under SSP: each worker's share from the fence's first sample.
  auto a = ledger_->Lease(LeaseReq(5, 3), v);
  auto b = ledger_->Lease(LeaseReq(9, 3), v);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(a->workers(), 0);  // an SSP lease, no split
  EXPECT_THAT(Runs(a->units()), ElementsAre(std::pair{30, 5}));
  EXPECT_THAT(Runs(b->units()), ElementsAre(std::pair{35, 5}));
  ReportBoth(*ledger_, v, 3, 0, 5);
  ReportBoth(*ledger_, v, 3, 0, 9);
  auto audit = AuditLedger(ledger_->Applied());
  ASSERT_TRUE(audit.ok()) << audit.status();
  EXPECT_EQ(audit->samples, 40);
  EXPECT_TRUE(audit->exactly_once());
  const std::map<int64_t, int> seen = Coverage(ledger_->Applied(), 25);
  ASSERT_EQ(seen.size(), 40u);
  for (const auto& [sample, times] : seen) EXPECT_EQ(times, 1) << sample;
}

// Between SSP and ASP the switch is at once, looser or tighter (both
// lease from the cursor); to the mode the job runs it is refused. A lease
// asked in a view that names another mode than the ledger's waits for the
// view.
TEST_F(LedgerTest, AsyncSwitchesAtOnce) {
  Open("ssp:1");
  v1::View v = MakeView(1, {1, 2});
  v.set_consistency("ssp:1");
  ASSERT_TRUE(ledger_->Lease(LeaseReq(1, 0), v).ok());
  ASSERT_TRUE(ledger_->Lease(LeaseReq(1, 1), v).ok());
  auto sw = ledger_->BeginSwitch(*ParseConsistency("asp"), "spread", 1);
  ASSERT_TRUE(sw.ok()) << sw.status();
  EXPECT_EQ(sw->step(), 2);  // past the largest clock leased
  EXPECT_EQ(ledger_->mode().ToString(), "asp");
  EXPECT_FALSE(ledger_->State().has_pending_switch());
  const absl::Status stale = ledger_->Lease(LeaseReq(2, 0), v).status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(stale.message(), HasSubstr("switched to asp"));
  v.set_consistency("asp");
  auto b = ledger_->Lease(LeaseReq(2, 0), v);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(Runs(b->units()), ElementsAre(std::pair{10, 5}));
  EXPECT_EQ(
      ledger_->BeginSwitch(*ParseConsistency("asp"), "", 2).status().code(),
      absl::StatusCode::kFailedPrecondition);
  // A tighter bound, at once as a looser one: the servers count it from
  // the switch.
  auto tighter = ledger_->BeginSwitch(*ParseConsistency("ssp:1"), "calm", 3);
  ASSERT_TRUE(tighter.ok()) << tighter.status();
  EXPECT_EQ(tighter->from(), "asp");
  EXPECT_EQ(ledger_->mode().ToString(), "ssp:1");
  v.set_consistency("ssp:1");
  auto c = ledger_->Lease(LeaseReq(2, 1), v);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Runs(c->units()), ElementsAre(std::pair{15, 5}));
}

// BSP, then SSP, then back to BSP. The switch back lets leases go on from
// the cursor up to the first sample from which whole batches end at the
// job's end, then refuses them; a departed worker's units are still
// leased; once every lease is applied BSP starts at step F = the step SSP
// started at plus the leases handed out since (past every chunk's version
// and every clock), its steps covering the samples from there. Every
// sample is applied once across both switches, a restarted ledger goes on
// from F, and the job no longer rolls back.
TEST_F(LedgerTest, SspGoesBackToBspOnceEveryLeaseIsApplied) {
  Open("bsp", /*on_disk=*/true);
  v1::LedgerJob job = Job();
  job.set_total_samples(100);  // 10 steps of 10
  v1::View v = MakeView(3, {5, 9});
  for (int64_t step : {0, 1}) {
    for (uint64_t w : {5, 9}) {
      ASSERT_TRUE(ledger_->Lease(LeaseReq(w, step, job), v).ok());
    }
  }
  ASSERT_TRUE(ledger_->BeginSwitch(*ParseConsistency("ssp:1"), "", 1).ok());
  ReportBoth(*ledger_, v, 0, 3);
  ReportBoth(*ledger_, v, 1, 3);
  ASSERT_TRUE(ledger_->MaybeCompleteSwitch().ok());
  ASSERT_EQ(ledger_->mode().ToString(), "ssp:1");
  v.set_consistency("ssp:1");
  // Clocks 2 (both) and 3 (worker 5): samples [20, 35).
  auto lease = [&](uint64_t w, int64_t clock, const v1::View& view) {
    return ledger_->Lease(LeaseReq(w, clock, job), view);
  };
  ASSERT_TRUE(lease(5, 2, v).ok());
  ASSERT_TRUE(lease(9, 2, v).ok());
  ASSERT_TRUE(lease(5, 3, v).ok());
  ReportBoth(*ledger_, v, 2, 0, 5);
  ReportBoth(*ledger_, v, 2, 0, 9);

  auto sw = ledger_->BeginSwitch(Consistency(), "probe", 2);
  ASSERT_TRUE(sw.ok()) << sw.status();
  EXPECT_EQ(sw->first_sample(), 40);  // 35 up to whole batches to 100
  EXPECT_EQ(sw->schedule_step(), 4);
  EXPECT_EQ(ledger_->mode().ToString(), "ssp:1");
  // Worker 9's clock 3 takes the 5 samples left before 40; its next ask
  // is refused, and marks it drained.
  auto last = lease(9, 3, v);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_THAT(Runs(last->units()), ElementsAre(std::pair{35, 5}));
  const absl::Status refused = lease(9, 4, v).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), HasSubstr("back to bsp"));
  EXPECT_TRUE(ledger_->Drained(9));
  // Worker 9 leaves: its clock 3 goes back to the queue, which worker 5
  // still leases while the switch waits.
  v1::View alone = MakeView(4, {5});
  alone.set_consistency("ssp:1");
  ASSERT_TRUE(ledger_->Sweep(alone).ok());
  auto requeued = lease(5, 4, alone);
  ASSERT_TRUE(requeued.ok()) << requeued.status();
  EXPECT_THAT(Runs(requeued->units()), ElementsAre(std::pair{35, 5}));
  EXPECT_EQ(lease(5, 5, alone).status().code(), absl::StatusCode::kUnavailable);
  ReportBoth(*ledger_, alone, 3, 0, 5);
  auto waiting = ledger_->MaybeCompleteSwitch();
  ASSERT_TRUE(waiting.ok());
  EXPECT_FALSE(waiting->has_value());  // clock 4 is not applied yet
  ReportBoth(*ledger_, alone, 4, 0, 5);
  auto done = ledger_->MaybeCompleteSwitch();
  ASSERT_TRUE(done.ok() && done->has_value()) << done.status();
  // Fenced at 2, then five leases: 2 + 5.
  EXPECT_EQ((*done)->step(), 7);
  EXPECT_EQ(ledger_->mode().ToString(), "bsp");
  EXPECT_EQ(ledger_->State().schedule_offset(), 7 - 4);
  EXPECT_FALSE(ledger_->RollsBack());
  EXPECT_FALSE(ledger_->Drained(9));  // BSP steps drain no one

  // Restarted: BSP from step 7, whose samples start at 40.
  Open("bsp", /*on_disk=*/true);
  EXPECT_EQ(ledger_->mode().ToString(), "bsp");
  alone.set_consistency("bsp");
  // An SSP clock before the switch's step: refused, saying why.
  const absl::Status stale = lease(5, 5, alone).status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(stale.message(), HasSubstr(kBeforeBackToBsp));
  for (int64_t step = 7; step < 13; ++step) {
    auto bsp = lease(5, step, alone);
    ASSERT_TRUE(bsp.ok()) << step << ": " << bsp.status();
    EXPECT_EQ(bsp->workers(), 1);
    EXPECT_EQ(bsp->schedule_offset(), 3);
    EXPECT_EQ(bsp->units(0).first(), 40 + (step - 7) * 10);
    ReportBoth(*ledger_, alone, step, 4);
  }
  EXPECT_EQ(lease(5, 13, alone).status().code(),
            absl::StatusCode::kOutOfRange);  // past the job's 100 samples
  auto audit = AuditLedger(ledger_->Applied());
  ASSERT_TRUE(audit.ok()) << audit.status();
  EXPECT_EQ(audit->samples, 100);
  EXPECT_TRUE(audit->exactly_once()) << audit->ToString();
  EXPECT_EQ(ledger_->BeginRollBack().status().code(),
            absl::StatusCode::kUnimplemented);
}

// No switch back to BSP once every sample is handed out: no BSP step is
// left to run.
TEST_F(LedgerTest, NoSwitchBackOnceEverySampleIsHandedOut) {
  Open("asp");
  v1::LedgerJob job = Job();
  job.set_total_samples(10);
  v1::View v = MakeView(1, {5});
  v.set_consistency("asp");
  ASSERT_TRUE(ledger_->Lease(LeaseReq(5, 0, job), v).ok());
  const absl::Status s = ledger_->BeginSwitch(Consistency(), "", 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("handed out"));
}

// A cancelled switch leaves the job in BSP: the fence is leased again.
TEST_F(LedgerTest, ACancelledSwitchLeasesTheFenceInBsp) {
  Open("bsp");
  const v1::View v = MakeView(3, {5});
  ASSERT_TRUE(ledger_->Lease(LeaseReq(5, 0), v).ok());
  ASSERT_TRUE(ledger_->BeginSwitch(*ParseConsistency("asp"), "", 1).ok());
  EXPECT_EQ(ledger_->Lease(LeaseReq(5, 1), v).status().code(),
            absl::StatusCode::kUnavailable);
  ASSERT_TRUE(ledger_->CancelSwitch().ok());
  auto again = ledger_->Lease(LeaseReq(5, 1), v);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->workers(), 1);
  EXPECT_EQ(ledger_->mode().ToString(), "bsp");
}

}  // namespace
}  // namespace strata::scheduler_internal
