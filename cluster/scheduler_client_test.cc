#include "cluster/scheduler_client.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "testing/temp_dir.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr absl::Duration kWait = absl::Seconds(10);

using ::strata::testing::TempDir;

std::unique_ptr<Scheduler> StartScheduler(SchedulerOptions options) {
  auto s = Scheduler::Start(std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::unique_ptr<SchedulerClient> ConnectWorker(const Scheduler& scheduler,
                                               bool leave_on_destroy = true) {
  SchedulerClientOptions options;
  options.scheduler_address = scheduler.address();
  options.heartbeat_interval = absl::Milliseconds(50);
  options.leave_on_destroy = leave_on_destroy;
  auto c = SchedulerClient::Connect(std::move(options));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

bool HasWorker(const v1::View& view, uint64_t id) {
  for (const v1::Member& m : view.workers()) {
    if (m.id() == id) return true;
  }
  return false;
}

TEST(SchedulerClient, TwoClientsSeeEachOther) {
  auto scheduler = StartScheduler({});
  auto a = ConnectWorker(*scheduler);
  auto b = ConnectWorker(*scheduler);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->member_id(), b->member_id());
  const uint64_t b_id = b->member_id();
  auto view = a->WaitForView(
      [&](const v1::View& v) { return HasWorker(v, b_id); }, kWait);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(HasWorker(*view, a->member_id()));
  EXPECT_TRUE(HasWorker(b->view(), a->member_id()));
}

TEST(SchedulerClient, ProgressReachesTheScheduler) {
  auto scheduler = StartScheduler({});
  auto a = ConnectWorker(*scheduler);
  a->SetProgress(42, 12.5);
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline &&
         scheduler->CurrentView().workers(0).clock() != 42) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(scheduler->CurrentView().workers(0).clock(), 42);
  EXPECT_EQ(scheduler->CurrentView().workers(0).samples_per_sec(), 12.5);
}

// A speed the scheduler would refuse (a step timed at zero seconds) is
// sent within its bounds: the heartbeat, and so the lease, goes on.
TEST(SchedulerClient, ProgressOutsideTheSchedulersBoundsIsClamped) {
  auto scheduler = StartScheduler({});
  auto a = ConnectWorker(*scheduler);
  a->SetProgress(43, std::numeric_limits<double>::infinity());
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline &&
         scheduler->CurrentView().workers(0).clock() != 43) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(scheduler->CurrentView().workers(0).clock(), 43);
  EXPECT_EQ(scheduler->CurrentView().workers(0).samples_per_sec(), 1e12);
  a->SetProgress(44, std::nan(""));
  while (absl::Now() < deadline &&
         scheduler->CurrentView().workers(0).clock() != 44) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(scheduler->CurrentView().workers(0).samples_per_sec(), 0.0);
}

// The steps a worker notes reach the view as its step times; a timing
// the scheduler would refuse is clamped first, so the lease goes on.
TEST(SchedulerClient, StepTimesReachTheView) {
  auto scheduler = StartScheduler({});
  auto a = ConnectWorker(*scheduler);
  a->NoteStep(0, 4, 0.4, 0.1, 0.05);
  a->NoteStep(1, 2, 0.4, 0.3, 7.0);  // idle clamped to its wait
  a->NoteStep(2, 0, 9.0, 9.0);       // no samples: not recorded
  a->NoteStep(3, 2, std::nan(""), -1.0, std::nan(""));  // clamped to 0 s
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline &&
         scheduler->CurrentView().workers(0).step_times().steps() < 3) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const v1::StepTimes st = scheduler->CurrentView().workers(0).step_times();
  EXPECT_EQ(st.steps(), 3u);
  EXPECT_DOUBLE_EQ(st.compute_s(), 0.4);  // the median of 0.4, 0.4, 0
  EXPECT_NEAR(st.wait_fraction(), 0.4 / 1.2, 1e-12);
  EXPECT_NEAR(st.idle_fraction(), (0.05 + 0.3) / 1.2, 1e-12);
  // Still a member: its heartbeats were taken.
  EXPECT_EQ(scheduler->CurrentView().workers_size(), 1);
}

TEST(SchedulerClient, SilentMemberExpiresAndOthersSeeTheEpochRise) {
  auto scheduler =
      StartScheduler({.lease = absl::Milliseconds(500),
                      .lease_check_interval = absl::Milliseconds(20)});
  auto a = ConnectWorker(*scheduler);
  auto b = ConnectWorker(*scheduler, /*leave_on_destroy=*/false);
  const uint64_t b_id = b->member_id();
  ASSERT_TRUE(a->WaitForView(
                   [&](const v1::View& v) { return HasWorker(v, b_id); }, kWait)
                  .ok());
  const uint64_t epoch = a->view().epoch();
  b.reset();  // no Leave: only the lease can end it
  // Still there right after: the lease has not run out yet.
  EXPECT_TRUE(HasWorker(a->view(), b_id));
  auto view = a->WaitForView(
      [&](const v1::View& v) { return !HasWorker(v, b_id); }, kWait);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_GT(view->epoch(), epoch);
  EXPECT_EQ(view->workers_epoch(), view->epoch());
  EXPECT_TRUE(HasWorker(*view, a->member_id()));  // a kept its lease
}

TEST(SchedulerClient, LeaveRemovesAtOnce) {
  auto scheduler = StartScheduler({});
  auto a = ConnectWorker(*scheduler);
  auto b = ConnectWorker(*scheduler);
  const uint64_t b_id = b->member_id();
  ASSERT_TRUE(b->Leave().ok());
  EXPECT_TRUE(
      a->WaitForView([&](const v1::View& v) { return !HasWorker(v, b_id); },
                     kWait)
          .ok());
  // Leaving again finds the member gone, which is what leaving wants (a
  // worker stopped past its lease wakes to a finished job and leaves).
  EXPECT_TRUE(b->Leave().ok());
}

TEST(SchedulerClient, ListenersSeeRisingEpochs) {
  auto scheduler = StartScheduler({});
  // Declared before the client: its listener writes here until the client
  // is destroyed (views keep arriving while the others leave).
  absl::Mutex mu;
  std::vector<uint64_t> epochs;
  auto a = ConnectWorker(*scheduler);
  a->AddViewListener([&](const v1::View& v) {
    absl::MutexLock lock(&mu);
    epochs.push_back(v.epoch());
  });
  std::vector<std::unique_ptr<SchedulerClient>> others;
  for (int i = 0; i < 3; ++i) others.push_back(ConnectWorker(*scheduler));
  auto four = a->WaitForView(
      [](const v1::View& v) { return v.workers_size() == 4; }, kWait);
  ASSERT_TRUE(four.ok()) << four.status();
  // Listeners run after the view is stored (never under the client's lock),
  // and views may be coalesced: wait until the listener saw this epoch.
  absl::MutexLock lock(&mu);
  auto seen = [&] { return !epochs.empty() && epochs.back() >= four->epoch(); };
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&seen), kWait));
  for (size_t i = 1; i < epochs.size(); ++i)
    EXPECT_GT(epochs[i], epochs[i - 1]);
}

TEST(SchedulerClient, LostLeaseRegistersAgainUnderANewId) {
  SimulatedClock clock;
  auto scheduler =
      StartScheduler({.lease_check_interval = absl::Hours(1), .clock = &clock});
  absl::Mutex mu;
  uint64_t old_id = 0, new_id = 0;
  SchedulerClientOptions options;
  options.scheduler_address = scheduler->address();
  options.heartbeat_interval = absl::Milliseconds(20);
  options.on_reregistered = [&](uint64_t o, uint64_t n) {
    absl::MutexLock lock(&mu);
    old_id = o;
    new_id = n;
  };
  auto a = SchedulerClient::Connect(options);
  ASSERT_TRUE(a.ok()) << a.status();
  const uint64_t first = (*a)->member_id();
  clock.Advance(absl::Seconds(11));
  scheduler->CheckLeasesNow();
  // The callback runs once the new id is adopted (the view with the new
  // member may arrive a moment earlier through the watch stream).
  {
    absl::MutexLock lock(&mu);
    auto called = [&] { return new_id != 0; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&called), kWait));
    EXPECT_EQ(old_id, first);
    EXPECT_NE(new_id, first);
    EXPECT_EQ(new_id, (*a)->member_id());
  }
  const uint64_t second = (*a)->member_id();
  auto view = (*a)->WaitForView(
      [&](const v1::View& v) { return HasWorker(v, second); }, kWait);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_FALSE(HasWorker(*view, first));
  // The new incarnation names the first, for the data ledger.
  for (const v1::Member& m : view->workers()) {
    if (m.id() != second) continue;
    EXPECT_EQ(m.worker(), first);
    EXPECT_EQ(m.incarnation(), 2u);
  }
}

TEST(SchedulerClient, SchedulerRestartKeepsMemberIdAndView) {
  const std::string dir = TempDir("restart");
  auto scheduler = StartScheduler({.data_dir = dir});
  const std::string address = scheduler->address();
  auto a = ConnectWorker(*scheduler);
  const uint64_t id = a->member_id();
  const uint64_t epoch = a->view().epoch();
  scheduler.reset();
  absl::SleepFor(absl::Milliseconds(300));  // heartbeats fail meanwhile

  scheduler = StartScheduler({.listen_address = address,
                              .data_dir = dir,
                              .lease = absl::Milliseconds(600),
                              .lease_check_interval = absl::Milliseconds(20)});
  ASSERT_NE(scheduler, nullptr);
  EXPECT_EQ(scheduler->CurrentView().epoch(), epoch);
  // a keeps its lease on the new scheduler by heartbeating with its old id.
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_TRUE(HasWorker(scheduler->CurrentView(), id));
  EXPECT_EQ(a->member_id(), id);
  // ... and its view continues with later epochs.
  auto b = ConnectWorker(*scheduler);
  const uint64_t b_id = b->member_id();
  EXPECT_GT(b_id, id);
  auto view = a->WaitForView(
      [&](const v1::View& v) { return HasWorker(v, b_id); }, kWait);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_GT(view->epoch(), epoch);
  EXPECT_TRUE(HasWorker(*view, id));
}

TEST(SchedulerClient, KvPutGetCompareAndSet) {
  auto scheduler = StartScheduler({});
  auto a = ConnectWorker(*scheduler);
  auto b = ConnectWorker(*scheduler);
  EXPECT_TRUE(
      absl::IsNotFound(a->KvGet("rank0", absl::ZeroDuration()).status()));
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      a->KvGet("never", absl::Milliseconds(200)).status()));
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(b->KvPut("rank0", "addr0").ok());
  });
  auto got = a->KvGet("rank0", kWait);
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "addr0");

  auto rev = a->KvCompareAndSet("leader", "a", 0);
  ASSERT_TRUE(rev.ok()) << rev.status();
  EXPECT_EQ(*rev, 1u);
  auto lost = b->KvCompareAndSet("leader", "b", 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(lost.status()));
  EXPECT_EQ(KvCurrentRevision(lost.status()), 1u);
  EXPECT_EQ(*b->KvGet("leader", absl::ZeroDuration()), "a");
}

TEST(SchedulerClient, ConnectFailsWhenNoSchedulerAnswers) {
  SchedulerClientOptions options;
  options.scheduler_address = "127.0.0.1:1";
  options.connect_timeout = absl::Milliseconds(300);
  auto c = SchedulerClient::Connect(options);
  EXPECT_TRUE(absl::IsDeadlineExceeded(c.status()) ||
              absl::IsUnavailable(c.status()))
      << c.status();
}

TEST(SchedulerClient, ConnectPassesOnTheSchedulersRefusal) {
  auto scheduler = StartScheduler({});
  SchedulerClientOptions options;
  options.scheduler_address = scheduler->address();
  options.role = v1::ROLE_SERVER;
  options.address = "127.0.0.1:9";
  options.shard = 3;
  EXPECT_TRUE(
      absl::IsInvalidArgument(SchedulerClient::Connect(options).status()));
}

}  // namespace
}  // namespace strata
