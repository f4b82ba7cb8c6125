// The scheduler's side of --consistency auto: the switch shown in the view,
// and bad settings refused.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "testing/scheduler/scheduler_fixture.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

// Waits up to 5 s for the view to run `mode`.
v1::View AwaitMode(Scheduler& s, const std::string& mode) {
  v1::View v = s.CurrentView();
  for (const absl::Time end = absl::Now() + absl::Seconds(5);
       v.consistency() != mode && absl::Now() < end;
       absl::SleepFor(absl::Milliseconds(10))) {
    v = s.CurrentView();
  }
  return v;
}

// A switch from BSP with no step leased lands at step 0 on the lease
// loop's next turn: the view names the new mode under a new epoch and
// lists the switch.
TEST_F(SchedulerTest, AnAutoJobSwitchesInTheView) {
  Start({.automatic = AutoConsistency{.max_staleness = 3},
         .lease = absl::Seconds(10)});
  ASSERT_TRUE(Register(v1::ROLE_WORKER).ok());
  const v1::View before = scheduler_->CurrentView();
  EXPECT_EQ(before.consistency(), "bsp");
  EXPECT_EQ(before.consistency_auto(), "auto:3");
  auto sw = scheduler_->SwitchConsistency(*ParseConsistency("ssp:2"), "test");
  ASSERT_TRUE(sw.ok()) << sw.status();
  EXPECT_EQ(sw->step(), 0);
  const v1::View after = AwaitMode(*scheduler_, "ssp:2");
  ASSERT_EQ(after.consistency(), "ssp:2");
  EXPECT_EQ(after.epoch(), before.epoch() + 1);
  EXPECT_EQ(after.workers_epoch(), before.workers_epoch());
  EXPECT_FALSE(after.has_consistency_pending());
  ASSERT_EQ(after.consistency_switches_size(), 1);
  EXPECT_EQ(after.consistency_switches(0).reason(), "test");
  // SSP to ASP at once; back to BSP refused before any worker leased
  // samples (its steps start from the ledger's cursor).
  ASSERT_TRUE(
      scheduler_->SwitchConsistency(*ParseConsistency("asp"), "spread").ok());
  EXPECT_EQ(scheduler_->CurrentView().consistency(), "asp");
  auto back = scheduler_->SwitchConsistency(Consistency(), "steady");
  EXPECT_EQ(back.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(back.status().message(), HasSubstr("no job yet"));
}

// auto:<s>:ssp: the view says so, its advice never names ASP (the rule's
// own test: scheduler/consistency_policy_test.cc), and a switch to ASP is
// refused while SSP is taken.
TEST_F(SchedulerTest, AnAutoJobPinnedToSspNeverSwitchesToAsp) {
  Start({.automatic = AutoConsistency{.max_staleness = 2, .allow_asp = false},
         .lease = absl::Seconds(10)});
  ASSERT_TRUE(Register(v1::ROLE_WORKER).ok());
  EXPECT_EQ(scheduler_->CurrentView().consistency_auto(), "auto:2:ssp");
  auto asp = scheduler_->SwitchConsistency(*ParseConsistency("asp"), "spread");
  EXPECT_EQ(asp.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(asp.status().message(), HasSubstr("SSP is the loosest mode"));
  EXPECT_EQ(scheduler_->CurrentView().consistency(), "bsp");
  ASSERT_TRUE(
      scheduler_->SwitchConsistency(*ParseConsistency("ssp:2"), "spread").ok());
  EXPECT_EQ(AwaitMode(*scheduler_, "ssp:2").consistency(), "ssp:2");
  EXPECT_FALSE(
      scheduler_->SwitchConsistency(*ParseConsistency("asp"), "spread").ok());
}

TEST_F(SchedulerTest, AutoSettingsThatCannotBeAreRefused) {
  for (SchedulerOptions o :
       {SchedulerOptions{.consistency = {.mode = Consistency::kAsp},
       .automatic = AutoConsistency{}},
        SchedulerOptions{.automatic = AutoConsistency{.max_staleness = 0}},
        SchedulerOptions{.automatic = AutoConsistency{}, .resume_step = 4}}) {
    o.clock = &clock_;
    EXPECT_EQ(Scheduler::Start(o).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  for (const char* bad : {"auto:", "auto:0", "auto:x", "autox", "auto:-1"}) {
    EXPECT_FALSE(ParseAutoConsistency(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseAutoConsistency("auto:7")->value().max_staleness, 7);
  EXPECT_FALSE(ParseAutoConsistency("ssp:2")->has_value());
}

}  // namespace
}  // namespace strata
