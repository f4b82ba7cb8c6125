#include "scheduler/consistency_switcher.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace strata::scheduler_internal {
namespace {

// A view of a job in `mode` whose workers are at `clocks`, advising
// `advice`.
v1::View At(const std::string& mode, const std::vector<int64_t>& clocks,
            const std::string& advice) {
  v1::View v;
  v.set_consistency(mode);
  for (int64_t c : clocks) v.add_workers()->set_clock(c);
  v.mutable_consistency_advice()->set_mode(advice);
  v.mutable_consistency_advice()->set_reason("because");
  return v;
}

// An advice is taken once the slowest worker went kHoldSteps with it.
TEST(ConsistencySwitcher, TakesAnAdviceThatHeld) {
  ConsistencySwitcher s;
  EXPECT_FALSE(s.Decide(At("bsp", {20, 30}, "ssp:2")).has_value());
  // The fast worker's steps do not count; the slowest one's do.
  EXPECT_FALSE(s.Decide(At("bsp", {20 + kHoldSteps - 1, 90}, "ssp:2")));
  std::optional<SwitchDecision> d =
      s.Decide(At("bsp", {20 + kHoldSteps, 90}, "ssp:2"));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->to.ToString(), "ssp:2");
  EXPECT_EQ(d->reason, "because");
}

// No advice, or the job's own mode, start the hold over; an advice that
// moves between other modes holds, and the last one is taken.
TEST(ConsistencySwitcher, OnlyNoAdviceOrTheJobsModeStartOver) {
  ConsistencySwitcher s;
  EXPECT_FALSE(s.Decide(At("bsp", {20}, "ssp:2")));
  EXPECT_FALSE(s.Decide(At("bsp", {25}, "")));
  EXPECT_FALSE(s.Decide(At("bsp", {26}, "asp")));
  EXPECT_FALSE(s.Decide(At("bsp", {27}, "bsp")));
  EXPECT_FALSE(s.Decide(At("bsp", {28}, "asp")));
  EXPECT_FALSE(s.Decide(At("bsp", {30}, "ssp:4")));
  std::optional<SwitchDecision> d =
      s.Decide(At("bsp", {28 + kHoldSteps}, "asp"));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->to.ToString(), "asp");
}

// Nothing while a switch is under way or the last one settles, no switch
// back to BSP (not built), and a tighter mode only after a longer hold.
TEST(ConsistencySwitcher, WaitsForTheLastSwitchAndNeverBackToBsp) {
  ConsistencySwitcher s;
  v1::View pending = At("bsp", {100}, "asp");
  pending.mutable_consistency_pending()->set_step(101);
  EXPECT_FALSE(s.Decide(pending));
  EXPECT_FALSE(s.Decide(pending));
  v1::View settling = At("ssp:2", {100}, "asp");
  settling.add_consistency_switches()->set_step(100 - kSettleSteps + 1);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(s.Decide(settling));
  // Settled: the hold starts.
  settling.mutable_consistency_switches(0)->set_step(100 - kSettleSteps);
  EXPECT_FALSE(s.Decide(settling));
  settling.mutable_workers(0)->set_clock(100 + kHoldSteps);
  EXPECT_TRUE(s.Decide(settling));
  // An advice of BSP once the job left it, held far past any hold: never
  // taken (going back is not built).
  for (const char* mode : {"ssp:2", "asp"}) {
    ConsistencySwitcher fresh;
    for (int64_t c = 100; c < 200; c += kHoldSteps) {
      EXPECT_FALSE(fresh.Decide(At(mode, {c}, "bsp"))) << mode;
    }
  }
  // An advice that turns from looser to tighter starts its hold over.
  {
    ConsistencySwitcher turning;
    EXPECT_FALSE(turning.Decide(At("ssp:2", {100}, "asp")));
    EXPECT_FALSE(turning.Decide(At("ssp:2", {100 + kHoldSteps - 1}, "ssp:1")));
    EXPECT_FALSE(
        turning.Decide(At("ssp:2", {100 + kTightenHoldSteps}, "ssp:1")));
    EXPECT_TRUE(turning.Decide(
        At("ssp:2", {100 + kHoldSteps - 1 + kTightenHoldSteps}, "ssp:1")));
  }
  // A tighter asynchronous mode is taken once it held kTightenHoldSteps.
  for (const auto& [mode, advice] :
       {std::pair{"asp", "ssp:4"}, {"ssp:3", "ssp:2"}}) {
    ConsistencySwitcher fresh;
    EXPECT_FALSE(fresh.Decide(At(mode, {100}, advice)));
    EXPECT_FALSE(fresh.Decide(At(mode, {100 + kHoldSteps}, advice)));
    EXPECT_FALSE(fresh.Decide(At(mode, {100 + kTightenHoldSteps - 1}, advice)));
    auto d = fresh.Decide(At(mode, {100 + kTightenHoldSteps}, advice));
    ASSERT_TRUE(d.has_value()) << mode << advice;
    EXPECT_EQ(d->to.ToString(), advice);
  }
  EXPECT_FALSE(s.Decide(At("ssp:2", {300}, "")));
  EXPECT_FALSE(s.Decide(v1::View()));  // no workers
}

}  // namespace
}  // namespace strata::scheduler_internal
