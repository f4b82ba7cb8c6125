// LeaseAhead: which held leases a step may use, and how many steps a
// worker asks for ahead.
#include "cluster/lease_ahead.h"

#include <gtest/gtest.h>

#include "scheduler/ledger.h"

namespace strata {
namespace {

static_assert(LeaseAhead::kMaxAhead == scheduler_internal::kMaxLeaseAhead,
              "a worker asks for at most what the ledger gives");

v1::View View(uint64_t workers_epoch, uint64_t generation = 0) {
  v1::View v;
  v.set_epoch(workers_epoch + 1);
  v.set_workers_epoch(workers_epoch);
  v.set_generation(generation);
  return v;
}

// A lease response for `step` with leases ahead for the next `ahead` steps,
// made in `workers_epoch` (BSP: `bsp`, else SSP/ASP).
v1::LeaseWorkResponse Leases(int64_t step, int ahead, uint64_t workers_epoch,
                             bool bsp = true) {
  v1::LeaseWorkResponse r;
  r.set_step(step);
  r.set_epoch(workers_epoch);
  if (bsp) r.set_workers(2);
  for (int i = 1; i <= ahead; ++i) {
    v1::LeaseWorkResponse* a = r.add_leased_ahead();
    a->set_step(step + i);
    a->set_epoch(workers_epoch);
    if (bsp) a->set_workers(2);
    v1::WorkUnit* u = a->add_units();
    u->set_first(10 * (step + i));
    u->set_count(5);
  }
  return r;
}

TEST(LeaseAhead, HeldLeasesServeTheirStepsInTheirView) {
  LeaseAhead leases;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  leases.Keep(Leases(0, 4, /*workers_epoch=*/3), /*member=*/7, 0);
  EXPECT_EQ(leases.held(), 4u);
  auto one = leases.Take(1, View(3), 7, t0);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->units(0).first(), 10);
  // Step 3: step 2's lease, skipped over, goes.
  ASSERT_TRUE(leases.Take(3, View(3), 7, t0).has_value());
  EXPECT_EQ(leases.held(), 1u);
  EXPECT_FALSE(leases.Take(3, View(3), 7, t0).has_value());  // taken once
  // Another workers epoch (BSP: the shares changed): the rest goes.
  EXPECT_FALSE(leases.Take(4, View(4), 7, t0).has_value());
  EXPECT_EQ(leases.held(), 0u);
}

TEST(LeaseAhead, AnotherMemberIdOrGenerationVoidsEveryLease) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (bool bsp : {true, false}) {
    LeaseAhead leases;
    leases.Keep(Leases(0, 4, 3, bsp), 7, 0);
    // SSP/ASP leases hold across workers epochs; BSP ones do not.
    EXPECT_EQ(leases.Take(1, View(5), 7, t0).has_value(), !bsp);
    leases.Keep(Leases(0, 4, 5, bsp), 7, 0);
    EXPECT_FALSE(leases.Take(2, View(5), /*member=*/8, t0).has_value());
    EXPECT_EQ(leases.held(), 0u);
    leases.Keep(Leases(0, 4, 5, bsp), 7, 0);
    EXPECT_FALSE(leases.Take(2, View(5, /*generation=*/1), 7, t0).has_value());
    EXPECT_EQ(leases.held(), 0u);
  }
}

TEST(LeaseAhead, AsksForTheCoverAtTheMeasuredStepRate) {
  LeaseAhead leases(absl::Seconds(30));
  absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_EQ(leases.WantAhead(0, t), LeaseAhead::kFirstAhead);
  // Steps of 100 ms: 300 steps cover 30 s.
  for (int64_t step = 0; step < 20; ++step) {
    leases.Take(step, View(1), 7, t);
    t += absl::Milliseconds(100);
  }
  EXPECT_EQ(leases.WantAhead(19, t), 300);
  // More than half of it held: none asked.
  leases.Keep(Leases(19, 151, 1), 7, 0);
  EXPECT_EQ(leases.WantAhead(19, t), 0);
  // Half or less: the whole cover again.
  EXPECT_TRUE(leases.Take(20, View(1), 7, t).has_value());
  EXPECT_EQ(leases.WantAhead(20, t), 300);
  // A failed ask waits a second before the next, then two.
  leases.AskFailed(t);
  EXPECT_EQ(leases.WantAhead(20, t + absl::Milliseconds(500)), 0);
  EXPECT_EQ(leases.WantAhead(20, t + absl::Seconds(1)), 300);
  leases.AskFailed(t + absl::Seconds(1));
  EXPECT_EQ(leases.WantAhead(20, t + absl::Seconds(2)), 0);
  EXPECT_EQ(leases.WantAhead(20, t + absl::Seconds(3)), 300);
  // Fast steps are capped by the ledger's limit.
  LeaseAhead fast(absl::Seconds(30));
  for (int64_t step = 0; step < 20; ++step) {
    fast.Take(step, View(1), 7, t);
    t += absl::Milliseconds(1);
  }
  EXPECT_EQ(fast.WantAhead(19, t), LeaseAhead::kMaxAhead);
  // No cover: nothing ahead.
  LeaseAhead off(absl::ZeroDuration());
  EXPECT_EQ(off.WantAhead(0, t), 0);
}

}  // namespace
}  // namespace strata
