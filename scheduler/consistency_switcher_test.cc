#include "scheduler/consistency_switcher.h"

#include <string>
#include <tuple>
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

// Nothing while a switch is under way or the last one settles, and a
// tighter mode (BSP too) only after a longer hold.
TEST(ConsistencySwitcher, WaitsForTheLastSwitchAndHoldsTighterLonger) {
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
  // An advice of BSP once the job left it: tighter, taken after the
  // longer hold.
  for (const char* mode : {"ssp:2", "asp"}) {
    ConsistencySwitcher fresh;
    EXPECT_FALSE(fresh.Decide(At(mode, {100}, "bsp"))) << mode;
    EXPECT_FALSE(fresh.Decide(At(mode, {100 + kTightenHoldSteps - 1}, "bsp")));
    auto d = fresh.Decide(At(mode, {100 + kTightenHoldSteps}, "bsp"));
    ASSERT_TRUE(d.has_value()) << mode;
    EXPECT_EQ(d->to.ToString(), "bsp");
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

// An SSP/ASP job tries BSP again kProbeSteps of its slowest worker's steps
// after it left it, whatever the advice (BSP's waits cannot be measured
// asynchronously), with no hold; each switch back to BSP the view lists
// doubles the wait, up to kMaxProbeDoublings times. A refused switch
// quiets the switcher for kHoldSteps.
TEST(ConsistencySwitcher, ProbesBspLessAndLessOften) {
  v1::View v = At("asp", {100}, "asp");
  v1::ConsistencySwitch* left = v.add_consistency_switches();
  left->set_from("bsp");
  left->set_to("asp");
  left->set_step(100);
  ConsistencySwitcher s;
  v.mutable_workers(0)->set_clock(100 + kProbeSteps - 1);
  EXPECT_FALSE(s.Decide(v));
  v.mutable_workers(0)->set_clock(100 + kProbeSteps);
  auto probe = s.Decide(v);
  ASSERT_TRUE(probe.has_value());
  EXPECT_EQ(probe->to.ToString(), "bsp");
  EXPECT_NE(probe->reason.find("probing BSP"), std::string::npos)
      << probe->reason;
  // Refused: quiet for kHoldSteps, then again.
  s.Refused(v);
  v.mutable_workers(0)->set_clock(100 + kProbeSteps + kHoldSteps - 1);
  EXPECT_FALSE(s.Decide(v));
  v.mutable_workers(0)->set_clock(100 + kProbeSteps + kHoldSteps);
  EXPECT_TRUE(s.Decide(v));
  // Back in BSP once, left again at 300: the next probe waits twice as long.
  for (auto [from, to, step] :
       {std::tuple{"asp", "bsp", 200}, {"bsp", "asp", 300}}) {
    v1::ConsistencySwitch* sw = v.add_consistency_switches();
    sw->set_from(from);
    sw->set_to(to);
    sw->set_step(step);
  }
  EXPECT_EQ(ProbeSteps(v), 2 * kProbeSteps);
  ConsistencySwitcher later;
  v.mutable_workers(0)->set_clock(300 + 2 * kProbeSteps - 1);
  EXPECT_FALSE(later.Decide(v));
  v.mutable_workers(0)->set_clock(300 + 2 * kProbeSteps);
  EXPECT_TRUE(later.Decide(v));
  for (int i = 0; i < 10; ++i) v.add_consistency_switches()->set_to("bsp");
  EXPECT_EQ(ProbeSteps(v), kProbeSteps << kMaxProbeDoublings);
  // Not while the job is in BSP.
  v.set_consistency("bsp");
  v.mutable_workers(0)->set_clock(100000);
  ConsistencySwitcher in_bsp;
  EXPECT_FALSE(in_bsp.Decide(v));
}

}  // namespace
}  // namespace strata::scheduler_internal
