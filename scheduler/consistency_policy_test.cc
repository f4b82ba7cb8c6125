// The consistency rule (scheduler/consistency_policy.h), case by case of
// its written steps, and its advice in the view.
#include "scheduler/consistency_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata {
namespace {

// `idle`: the share of its steps its processors sat idle while it waited
// (negative: all of its wait, as on a GPU or a host of its own).
v1::Member Worker(double ms_per_sample, double spread, double wait,
                  uint32_t steps = 16, double idle = -1) {
  v1::Member m;
  m.set_role(v1::ROLE_WORKER);
  v1::StepTimes* t = m.mutable_step_times();
  t->set_steps(steps);
  t->set_compute_s_per_sample(ms_per_sample / 1e3);
  t->set_compute_s(ms_per_sample / 1e3 * 4);
  t->set_jitter(spread);
  t->set_wait_fraction(wait);
  t->set_idle_fraction(idle < 0 ? wait : idle);
  return m;
}

const Consistency kBsp{Consistency::kBsp, 0};
const Consistency kSsp2{Consistency::kSsp, 2};

TEST(ConsistencyPolicy, NoAdviceBeforeEveryWorkerMeasuredEnough) {
  EXPECT_EQ(AdviseConsistency(kBsp, {Worker(1, 0.5, 0.5)}, 4).mode(), "");
  EXPECT_EQ(
      AdviseConsistency(kBsp, {Worker(1, 0.5, 0.5), Worker(1, 0.5, 0.5, 7)}, 4)
          .mode(),
      "");
  v1::Member fresh;  // joined, no step reported yet
  fresh.set_role(v1::ROLE_WORKER);
  EXPECT_EQ(AdviseConsistency(
                kBsp, {Worker(1, 0.5, 0.5), Worker(1, 0.5, 0.5), fresh}, 4)
                .mode(),
            "");
}

TEST(ConsistencyPolicy, SteadyStepsStayBspWhateverTheSpeeds) {
  // One worker 3x slower, both steady: the shares absorb it.
  const v1::ConsistencyAdvice a =
      AdviseConsistency(kSsp2, {Worker(1, 0.05, 0.6), Worker(3, 0.10, 0.0)}, 4);
  EXPECT_EQ(a.mode(), "bsp");
  EXPECT_NE(a.reason().find("steady"), std::string::npos) << a.reason();
}

TEST(ConsistencyPolicy, BspStaysWhileItsGateWaitIsSmall) {
  const auto workers = {Worker(1, 0.3, 0.08), Worker(1, 0.2, 0.02)};
  EXPECT_EQ(AdviseConsistency(kBsp, workers, 4).mode(), "bsp");
  // Not once the job runs SSP: rule 2 is BSP's own wait.
  EXPECT_EQ(AdviseConsistency(kSsp2, workers, 4).mode(), "ssp:4");
}

// Waits whose processors the host's other work used (CPU workers sharing
// cores) are no time an asynchronous mode could win back.
TEST(ConsistencyPolicy, BspStaysWhileItsWaitsLeaveTheProcessorsBusy) {
  const std::vector<v1::Member> busy = {Worker(1, 0.5, 0.6, 16, 0.04),
                                        Worker(1, 0.4, 0.7, 16, 0.08)};
  const v1::ConsistencyAdvice a = AdviseConsistency(kBsp, busy, 4);
  EXPECT_EQ(a.mode(), "bsp");
  EXPECT_NE(a.reason().find("wait 65%"), std::string::npos) << a.reason();
  EXPECT_NE(a.reason().find("idle 6%"), std::string::npos) << a.reason();
  // The same waits with the processors idle: the rule goes on.
  const std::vector<v1::Member> idle = {Worker(1, 0.5, 0.6, 16, 0.5),
                                        Worker(1, 0.4, 0.7, 16, 0.3)};
  EXPECT_EQ(AdviseConsistency(kBsp, idle, 4).mode(), "asp");
}

TEST(ConsistencyPolicy, SpreadPastTheSharesGetsTheLeastSlackThatAveragesIt) {
  // ceil((0.2 / 0.15)^2) = 2; ceil((0.3 / 0.15)^2) = 4.
  EXPECT_EQ(
      AdviseConsistency(kBsp, {Worker(1, 0.2, 0.3), Worker(1, 0.1, 0.3)}, 4)
          .mode(),
      "ssp:2");
  const v1::ConsistencyAdvice a =
      AdviseConsistency(kBsp, {Worker(1, 0.3, 0.3), Worker(1, 0.1, 0.3)}, 4);
  EXPECT_EQ(a.mode(), "ssp:4");
  EXPECT_NE(a.reason().find("spreads 30%"), std::string::npos) << a.reason();
}

TEST(ConsistencyPolicy, AspOnlyWithinTheStalenessCap) {
  // A spread of 60% needs 16 steps of slack, past 4. Two equal workers:
  // ASP's pushes are one apart.
  EXPECT_EQ(
      AdviseConsistency(kBsp, {Worker(1, 0.6, 0.4), Worker(1, 0.6, 0.4)}, 4)
          .mode(),
      "asp");
  // Six equal workers: five pushes land during each step, past 4.
  std::vector<v1::Member> six(6, Worker(1, 0.6, 0.4));
  const v1::ConsistencyAdvice a = AdviseConsistency(kBsp, six, 4);
  EXPECT_EQ(a.mode(), "ssp:4");
  EXPECT_NE(a.reason().find("5.0 pushes"), std::string::npos) << a.reason();
  // A worker 4x slower than the other sees 4 of its pushes a step.
  EXPECT_EQ(
      AdviseConsistency(kBsp, {Worker(4, 0.6, 0.4), Worker(1, 0.6, 0.4)}, 3)
          .mode(),
      "ssp:3");
}

TEST(ConsistencyPolicy, AJobThatPinsSspAsItsLoosestModeGetsNoAsp) {
  const std::vector<v1::Member> two = {Worker(1, 0.6, 0.4),
                                       Worker(1, 0.6, 0.4)};
  ASSERT_EQ(AdviseConsistency(kBsp, two, 4).mode(), "asp");
  const v1::ConsistencyAdvice a =
      AdviseConsistency(kBsp, two, 4, /*allow_asp=*/false);
  EXPECT_EQ(a.mode(), "ssp:4");
  EXPECT_NE(a.reason().find("no looser mode than SSP"), std::string::npos)
      << a.reason();
  // Below the cap the rule's own SSP bound stands.
  EXPECT_EQ(AdviseConsistency(kBsp, {Worker(1, 0.2, 0.3), Worker(1, 0.1, 0.3)},
                              4, /*allow_asp=*/false)
                .mode(),
            "ssp:2");
}

}  // namespace
}  // namespace strata
