// StepTimes: what a worker's heartbeats report of its steps, checked and
// summarized; and the summary in the view through Membership.
#include "scheduler/step_times.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace strata {
namespace {

google::protobuf::RepeatedPtrField<v1::StepTiming> Timings(
    std::initializer_list<std::array<double, 4>> rows) {
  google::protobuf::RepeatedPtrField<v1::StepTiming> out;
  for (const auto& [step, samples, compute, wait] : rows) {
    v1::StepTiming* t = out.Add();
    t->set_step(static_cast<int64_t>(step));
    t->set_samples(static_cast<uint64_t>(samples));
    t->set_compute_s(compute);
    t->set_wait_s(wait);
  }
  return out;
}

TEST(StepTimes, SummarizesTheWindow) {
  StepTimes t;
  EXPECT_EQ(t.Summary().steps(), 0u);
  // Per sample: 0.1, 0.1, 0.2, 0.2 s (a share of 4 samples, then of 2).
  t.Add(Timings({{0, 4, 0.4, 0.1},
                 {1, 4, 0.4, 0.1},
                 {2, 2, 0.4, 0.3},
                 {3, 2, 0.4, 0.3}}));
  const v1::StepTimes s = t.Summary();
  EXPECT_EQ(s.steps(), 4u);
  EXPECT_DOUBLE_EQ(s.compute_s(), 0.4);
  EXPECT_NEAR(s.compute_s_per_sample(), 0.15, 1e-12);
  // Mean 0.15, standard deviation 0.05.
  EXPECT_NEAR(s.jitter(), 0.05 / 0.15, 1e-12);
  EXPECT_NEAR(s.wait_fraction(), 0.8 / (1.6 + 0.8), 1e-12);
  // No idle seconds reported: the whole wait counts as idle.
  EXPECT_NEAR(s.idle_fraction(), 0.8 / (1.6 + 0.8), 1e-12);
}

// The seconds of a wait the worker's processors sat idle (StepTiming.idle_s),
// at most the wait; steps that did not measure them count their whole wait.
TEST(StepTimes, CountsTheIdleShareOfTheWaits) {
  StepTimes t;
  auto steps = Timings(
      {{0, 4, 0.4, 0.5}, {1, 4, 0.4, 0.5}, {2, 4, 0.4, 0.2}, {3, 4, 0.4, 0.1}});
  steps[0].set_idle_s(0.1);
  steps[1].set_idle_s(0);
  steps[2].set_idle_s(0.9);  // more than its wait: the wait
  t.Add(steps);              // step 3: not measured, its 0.1 s of wait
  const v1::StepTimes s = t.Summary();
  EXPECT_NEAR(s.wait_fraction(), 1.3 / (1.6 + 1.3), 1e-12);
  EXPECT_NEAR(s.idle_fraction(), (0.1 + 0 + 0.2 + 0.1) / (1.6 + 1.3), 1e-12);
}

TEST(StepTimes, KeepsTheLastStepsAndAStepReportedAgainOnce) {
  StepTimes t;
  for (int step = 0; step < 40; ++step) {
    t.Add(Timings({{static_cast<double>(step), 1, step < 30 ? 9.0 : 1.0, 0}}));
  }
  v1::StepTimes s = t.Summary();
  EXPECT_EQ(s.steps(), static_cast<uint32_t>(StepTimes::kWindow));
  // The window holds steps 24..39: six at 9 s, ten at 1 s.
  EXPECT_DOUBLE_EQ(s.compute_s(), 1.0);
  // A redo of step 39 replaces its timing.
  t.Add(Timings({{39, 1, 1.0, 0}}));
  EXPECT_EQ(t.Summary().steps(), static_cast<uint32_t>(StepTimes::kWindow));
  // Steady steps: no spread.
  StepTimes steady;
  steady.Add(Timings({{0, 2, 0.5, 0}, {1, 2, 0.5, 0}}));
  EXPECT_EQ(steady.Summary().jitter(), 0);
  EXPECT_EQ(steady.Summary().wait_fraction(), 0);
}

TEST(StepTimes, RefusesWhatNoStepCouldReport) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(StepTimes::Validate(Timings({{0, 1, 0.5, 0.1}})).ok());
  for (const auto& bad :
       {Timings({{-1, 1, 0.5, 0}}), Timings({{0, 0, 0.5, 0}}),
        Timings({{0, 1, -0.5, 0}}), Timings({{0, 1, std::nan(""), 0}}),
        Timings({{0, 1, 0.5, inf}}), Timings({{0, 1, 1e6, 0}})}) {
    const absl::Status s = StepTimes::Validate(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
  auto idle = Timings({{0, 1, 0.5, 0.1}});
  for (const double bad : {-0.1, std::nan(""), inf, 1e6}) {
    idle[0].set_idle_s(bad);
    EXPECT_EQ(StepTimes::Validate(idle).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  google::protobuf::RepeatedPtrField<v1::StepTiming> many;
  for (int i = 0; i <= StepTimes::kMaxPerHeartbeat; ++i) {
    *many.Add() = Timings({{static_cast<double>(i), 1, 0.1, 0}})[0];
  }
  EXPECT_EQ(StepTimes::Validate(many).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
