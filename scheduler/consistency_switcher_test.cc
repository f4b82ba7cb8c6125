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

// Sets each worker's id and time per sample (steps measured: 16).
void Speeds(v1::View& v, const std::vector<double>& s_per_sample) {
  for (int i = 0; i < v.workers_size(); ++i) {
    v1::Member* w = v.mutable_workers(i);
    w->set_id(static_cast<uint64_t>(i + 1));
    w->mutable_step_times()->set_steps(16);
    w->mutable_step_times()->set_compute_s_per_sample(s_per_sample[i]);
  }
}

// The job left BSP with worker 3 at 3x the others' time per sample: while
// that holds, or it slows further, only the timer probes; once worker 3
// recovers (its time against the median falls kSpeedChange times) the job
// tries BSP at once, after the switch settles.
TEST(ConsistencySwitcher, ProbesAtOnceWhenTheSpeedsThatMadeBspWaitChange) {
  ConsistencySwitcher s;
  v1::View bsp = At("bsp", {100, 100, 100}, "asp");
  Speeds(bsp, {1.0, 1.1, 3.0});
  EXPECT_FALSE(s.Decide(bsp));
  for (v1::Member& w : *bsp.mutable_workers()) w.set_clock(100 + kHoldSteps);
  ASSERT_TRUE(s.Decide(bsp));  // to ASP: the speeds are kept
  v1::View asp = At("asp", {120, 120, 120}, "asp");
  v1::ConsistencySwitch* left = asp.add_consistency_switches();
  left->set_from("bsp");
  left->set_to("asp");
  left->set_step(110);
  Speeds(asp, {1.0, 1.2, 2.9});
  for (int64_t c : {120, 130, 140}) {
    for (v1::Member& w : *asp.mutable_workers()) w.set_clock(c);
    EXPECT_FALSE(s.Decide(asp)) << c;  // unchanged (and 130: settled)
  }
  Speeds(asp, {1.0, 1.2, 8.0});  // slower still: BSP would wait longer
  EXPECT_FALSE(s.Decide(asp));
  Speeds(asp, {0.5, 1.2, 2.9});  // a fast one got faster: no straggler
  EXPECT_FALSE(s.Decide(asp));
  Speeds(asp, {1.0, 1.2, 1.3});  // worker 3 recovered
  auto probe = s.Decide(asp);
  ASSERT_TRUE(probe.has_value());
  EXPECT_EQ(probe->to.ToString(), "bsp");
  EXPECT_NE(probe->reason.find("worker 3 ran 2.86x the others'"),
            std::string::npos)
      << probe->reason;
  // A straggler that leaves the job: BSP is tried at once too.
  {
    ConsistencySwitcher gone;
    for (v1::Member& w : *bsp.mutable_workers()) w.set_clock(100);
    ASSERT_FALSE(gone.Decide(bsp));
    for (v1::Member& w : *bsp.mutable_workers()) w.set_clock(108);
    ASSERT_TRUE(gone.Decide(bsp));
    v1::View two = asp;
    two.mutable_workers()->RemoveLast();  // worker 3
    Speeds(two, {1.0, 1.2});
    auto left = gone.Decide(two);
    ASSERT_TRUE(left.has_value());
    EXPECT_NE(left->reason.find("worker 3, 2.86x"), std::string::npos)
        << left->reason;
  }
  // Two workers: the straggler against the other one.
  {
    ConsistencySwitcher pair;
    v1::View bsp2 = At("bsp", {100, 100}, "asp");
    Speeds(bsp2, {1.0, 3.0});
    ASSERT_FALSE(pair.Decide(bsp2));
    for (v1::Member& w : *bsp2.mutable_workers()) w.set_clock(108);
    ASSERT_TRUE(pair.Decide(bsp2));
    v1::View asp2 = At("asp", {140, 140}, "asp");
    *asp2.add_consistency_switches() = asp.consistency_switches(0);
    Speeds(asp2, {1.0, 1.1});
    EXPECT_TRUE(pair.Decide(asp2));
  }
  // Not before the switch settled.
  ConsistencySwitcher early;
  ASSERT_FALSE(early.Decide(bsp));  // its hold starts at 108
  for (v1::Member& w : *bsp.mutable_workers()) w.set_clock(116);
  ASSERT_TRUE(early.Decide(bsp));
  for (v1::Member& w : *asp.mutable_workers())
    w.set_clock(110 + kSettleSteps - 1);
  EXPECT_FALSE(early.Decide(asp));
}

}  // namespace
}  // namespace strata::scheduler_internal
