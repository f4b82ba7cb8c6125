// The scheduler's membership: registration, leases, the view and its
// watchers, shard slots, restarts on its data dir, and bad requests. The
// KV store and the servers' data-directory leases have their own files.
#include "scheduler/scheduler.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scheduler/scheduler_fixture.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST_F(SchedulerTest, RegisterHeartbeatLeave) {
  Start();
  const uint64_t epoch0 = scheduler_->CurrentView().epoch();
  auto reg = Register(v1::ROLE_WORKER);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->member_id(), 1u);
  EXPECT_EQ(reg->lease_ms(), 10000);
  EXPECT_EQ(reg->view().epoch(), epoch0 + 1);
  EXPECT_EQ(reg->view().workers_epoch(), epoch0 + 1);
  ASSERT_EQ(reg->view().workers_size(), 1);
  EXPECT_EQ(reg->view().workers(0).id(), 1u);
  EXPECT_EQ(reg->view().workers(0).shard(), -1);
  EXPECT_EQ(reg->view().consistency(), "bsp");

  // Progress shows in the view without a new epoch.
  auto hb = Heartbeat(1, /*step=*/7);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->epoch(), epoch0 + 1);
  v1::View view = scheduler_->CurrentView();
  EXPECT_EQ(view.epoch(), epoch0 + 1);
  EXPECT_EQ(view.workers(0).clock(), 7);
  EXPECT_EQ(view.workers(0).samples_per_sec(), 100.0);

  // What no member could report is refused and leaves the view as it was.
  for (auto [clock, speed] : std::vector<std::pair<int64_t, double>>{
           {-5, 1.0},
           {std::numeric_limits<int64_t>::max(), 1.0},
           {8, std::nan("")},
           {8, -1.0},
           {8, std::numeric_limits<double>::infinity()}}) {
    v1::HeartbeatRequest bad;
    bad.set_member_id(1);
    bad.set_clock(clock);
    bad.set_samples_per_sec(speed);
    grpc::ClientContext ctx;
    v1::HeartbeatResponse resp;
    EXPECT_EQ(stub_->Heartbeat(&ctx, bad, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << clock << " " << speed;
  }
  view = scheduler_->CurrentView();
  EXPECT_EQ(view.workers(0).clock(), 7);
  EXPECT_EQ(view.workers(0).samples_per_sec(), 100.0);

  // A worker's wire paths show in the view; more slots than the job's
  // one are refused, and a heartbeat without them keeps the last ones.
  EXPECT_FALSE(view.workers(0).has_wire());
  {
    v1::HeartbeatRequest req;
    req.set_member_id(1);
    req.set_clock(8);
    req.mutable_wire()->set_bulk(1);
    grpc::ClientContext ctx;
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(stub_->Heartbeat(&ctx, req, &resp).ok());
    for (uint32_t grpc : {1u, std::numeric_limits<uint32_t>::max()}) {
      req.mutable_wire()->set_grpc(grpc);
      grpc::ClientContext bad_ctx;
      EXPECT_EQ(stub_->Heartbeat(&bad_ctx, req, &resp).error_code(),
                grpc::StatusCode::INVALID_ARGUMENT)
          << grpc;
    }
  }
  ASSERT_TRUE(Heartbeat(1, /*step=*/9).ok());
  view = scheduler_->CurrentView();
  EXPECT_EQ(view.workers(0).clock(), 9);
  EXPECT_EQ(view.workers(0).wire().bulk(), 1u);
  EXPECT_EQ(view.workers(0).wire().grpc(), 0u);
  EXPECT_EQ(view.workers(0).wire().region(), 0u);

  ASSERT_TRUE(Leave(1).ok());
  view = scheduler_->CurrentView();
  EXPECT_EQ(view.epoch(), epoch0 + 2);
  EXPECT_EQ(view.workers_size(), 0);
  EXPECT_TRUE(absl::IsNotFound(Heartbeat(1).status()));
  EXPECT_TRUE(absl::IsNotFound(Leave(1)));
  // Ids are never reused.
  EXPECT_EQ(Register(v1::ROLE_WORKER)->member_id(), 2u);
}

TEST_F(SchedulerTest, LeaseExpiryRemovesMemberAndRaisesEpoch) {
  Start();
  const uint64_t w1 = Register(v1::ROLE_WORKER)->member_id();
  const uint64_t w2 = Register(v1::ROLE_WORKER)->member_id();
  const uint64_t epoch = scheduler_->CurrentView().epoch();
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(w1).ok());
  clock_.Advance(absl::Seconds(5));  // w2 is 11 s silent, w1 5 s
  scheduler_->CheckLeasesNow();

  v1::View view = scheduler_->CurrentView();
  EXPECT_EQ(view.epoch(), epoch + 1);
  EXPECT_EQ(view.workers_epoch(), epoch + 1);
  ASSERT_EQ(view.workers_size(), 1);
  EXPECT_EQ(view.workers(0).id(), w1);
  EXPECT_TRUE(absl::IsNotFound(Heartbeat(w2).status()));
  EXPECT_TRUE(Heartbeat(w1).ok());
}

TEST_F(SchedulerTest, ClientsHoldLeasesButStayOutOfTheView) {
  Start();
  const uint64_t epoch = scheduler_->CurrentView().epoch();
  auto reg = Register(v1::ROLE_CLIENT);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(reg->view().epoch(), epoch);
  EXPECT_EQ(reg->view().workers_size(), 0);
  EXPECT_TRUE(Heartbeat(reg->member_id()).ok());
  EXPECT_TRUE(Leave(reg->member_id()).ok());
  EXPECT_EQ(scheduler_->CurrentView().epoch(), epoch);
}

// --replicas 2: a slot holds a primary (its oldest member) and a backup;
// a third server is refused; when the primary's lease runs out the backup
// is the primary in the same view change, with no rollback; a replica
// joining a slot that serves once the job has begun is refused.
// A slot's second server joins catching up (never promoted until it has),
// becomes a backup once it caught up from the slot's primary, and is
// promoted when the primary's lease runs out; a server joining after that
// catches up from the new primary, and not from the one that left.
TEST_F(SchedulerTest, ReplicatedSlotsPromoteTheirBackup) {
  Start({.num_shards = 1, .replicas = 2, .lease = absl::Seconds(10)});
  auto primary = Register(v1::ROLE_SERVER, 0, "a:1");
  ASSERT_TRUE(primary.ok()) << primary.status();
  EXPECT_FALSE(primary->view().servers(0).catching_up());
  auto backup = Register(v1::ROLE_SERVER, 0, "b:1");
  ASSERT_TRUE(backup.ok()) << backup.status();
  v1::View view = scheduler_->CurrentView();
  EXPECT_EQ(view.replicas(), 2u);
  ASSERT_EQ(view.shard_map().slots_size(), 1);
  EXPECT_EQ(view.shard_map().slots(0).backups_size(), 0);
  ASSERT_EQ(view.shard_map().slots(0).joining_size(), 1);
  EXPECT_EQ(view.shard_map().slots(0).joining(0).address(), "b:1");
  EXPECT_TRUE(absl::IsNotFound(CaughtUp(primary->member_id(), 0)));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      CaughtUp(backup->member_id(), backup->member_id())));
  ASSERT_TRUE(CaughtUp(backup->member_id(), primary->member_id()).ok());
  view = scheduler_->CurrentView();
  const v1::ShardSlot& slot = view.shard_map().slots(0);
  EXPECT_EQ(slot.member_id(), primary->member_id());
  EXPECT_EQ(slot.address(), "a:1");
  ASSERT_EQ(slot.backups_size(), 1);
  EXPECT_EQ(slot.backups(0).member_id(), backup->member_id());
  EXPECT_EQ(slot.backups(0).address(), "b:1");
  EXPECT_EQ(slot.joining_size(), 0);
  // A retry (its answer lost) is answered OK again.
  EXPECT_TRUE(CaughtUp(backup->member_id(), primary->member_id()).ok());
  auto third = Register(v1::ROLE_SERVER, 0, "c:1");
  EXPECT_TRUE(absl::IsFailedPrecondition(third.status())) << third.status();
  EXPECT_THAT(third.status().message(), HasSubstr("1 replica(s)"));

  const uint64_t worker = Register(v1::ROLE_WORKER)->member_id();
  ASSERT_TRUE(LeaseWork(worker, 0).ok());  // the job has begun
  const uint64_t generation = scheduler_->CurrentView().generation();
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(backup->member_id()).ok());
  ASSERT_TRUE(Heartbeat(worker).ok());
  clock_.Advance(absl::Seconds(5));  // the primary is 11 s silent
  scheduler_->CheckLeasesNow();
  view = scheduler_->CurrentView();
  EXPECT_EQ(view.shard_map().slots(0).member_id(), backup->member_id());
  EXPECT_EQ(view.shard_map().slots(0).address(), "b:1");
  EXPECT_EQ(view.shard_map().slots(0).backups_size(), 0);
  EXPECT_EQ(view.generation(), generation);

  // While the job runs: no rollback, and only the live primary counts.
  auto late = Register(v1::ROLE_SERVER, 0, "d:1");
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(scheduler_->CurrentView().generation(), generation);
  EXPECT_EQ(scheduler_->CurrentView().shard_map().slots(0).joining_size(), 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      CaughtUp(late->member_id(), primary->member_id())));
  ASSERT_TRUE(CaughtUp(late->member_id(), backup->member_id()).ok());
  EXPECT_EQ(scheduler_->CurrentView().shard_map().slots(0).backups_size(), 1);
}

TEST_F(SchedulerTest, ServersOccupyOneShardSlotEach) {
  Start({.num_shards = 2, .lease = absl::Seconds(10)});
  auto s0 = Register(v1::ROLE_SERVER, 0, "a:1");
  ASSERT_TRUE(s0.ok()) << s0.status();
  EXPECT_EQ(s0->view().shard_map().slots_size(), 2);
  EXPECT_EQ(s0->view().shard_map().slots(0).member_id(), s0->member_id());
  EXPECT_EQ(s0->view().shard_map().slots(0).address(), "a:1");
  EXPECT_EQ(s0->view().shard_map().slots(1).member_id(), 0u);
  const uint64_t version = s0->view().shard_map().version();

  auto dup = Register(v1::ROLE_SERVER, 0, "b:1");
  EXPECT_TRUE(absl::IsFailedPrecondition(dup.status())) << dup.status();
  EXPECT_THAT(dup.status().message(), HasSubstr("already served"));
  EXPECT_TRUE(absl::IsInvalidArgument(Register(v1::ROLE_SERVER, 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Register(v1::ROLE_SERVER, -1).status()));
  auto s1 = Register(v1::ROLE_SERVER, 1, "c:1");
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->view().shard_map().version(), version + 1);

  // Slot 0's server runs out; the slot is freed, then taken again.
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(s1->member_id()).ok());
  clock_.Advance(absl::Seconds(5));
  scheduler_->CheckLeasesNow();
  v1::View view = scheduler_->CurrentView();
  EXPECT_EQ(view.shard_map().slots(0).member_id(), 0u);
  EXPECT_EQ(view.shard_map().slots(0).address(), "");
  EXPECT_EQ(view.shard_map().version(), version + 2);
  auto again = Register(v1::ROLE_SERVER, 0, "b:1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->view().shard_map().slots(0).address(), "b:1");
  EXPECT_EQ(again->view().shard_map().version(), version + 3);
  EXPECT_EQ(again->view().servers_size(), 2);
}

TEST_F(SchedulerTest, ExpiredServerSlotCanBeTakenBeforeTheLeaseCheck) {
  Start({.lease_check_interval = absl::Hours(1)});
  ASSERT_TRUE(Register(v1::ROLE_SERVER, 0, "a:1").ok());
  clock_.Advance(absl::Seconds(11));
  EXPECT_TRUE(Register(v1::ROLE_SERVER, 0, "b:1").ok());
}

TEST_F(SchedulerTest, WatchViewSeesChangesInOrderOfRisingEpoch) {
  Start();
  grpc::ClientContext ctx;
  v1::WatchViewRequest req;
  auto reader = stub_->WatchView(&ctx, req);
  v1::View view;
  ASSERT_TRUE(reader->Read(&view));  // the current view, at once
  uint64_t last = view.epoch();
  for (int i = 0; i < 3; ++i) {
    const uint64_t id = Register(v1::ROLE_WORKER)->member_id();
    ASSERT_TRUE(reader->Read(&view));
    EXPECT_GT(view.epoch(), last);
    EXPECT_EQ(view.workers_size(), i + 1);
    EXPECT_EQ(view.workers(i).id(), id);
    last = view.epoch();
  }
  ASSERT_TRUE(Leave(1).ok());
  ASSERT_TRUE(reader->Read(&view));
  EXPECT_EQ(view.epoch(), last + 1);
  EXPECT_EQ(view.workers_size(), 2);
  ctx.TryCancel();
  while (reader->Read(&view)) {
  }
  reader->Finish();
}

TEST_F(SchedulerTest, WatchViewFromAKnownEpochWaitsForANewerOne) {
  Start();
  grpc::ClientContext ctx;
  v1::WatchViewRequest req;
  req.set_known_epoch(scheduler_->CurrentView().epoch());
  auto reader = stub_->WatchView(&ctx, req);
  ASSERT_TRUE(Register(v1::ROLE_WORKER).ok());
  v1::View view;
  ASSERT_TRUE(reader->Read(&view));
  EXPECT_EQ(view.workers_size(), 1);
  ctx.TryCancel();
  while (reader->Read(&view)) {
  }
  reader->Finish();
}

TEST_F(SchedulerTest, ShutdownEndsWatchStreams) {
  Start();
  grpc::ClientContext ctx;
  auto reader = stub_->WatchView(&ctx, v1::WatchViewRequest());
  v1::View view;
  ASSERT_TRUE(reader->Read(&view));
  const absl::Time start = absl::Now();
  std::thread stopper([&] { scheduler_->Shutdown(); });
  EXPECT_FALSE(reader->Read(&view));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  stopper.join();
  scheduler_->Wait();
  scheduler_->Shutdown();  // idempotent
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(SchedulerTest, RestartOnTheSameDataDirCarriesOn) {
  const std::string dir = TempDir("restart");
  Start({.data_dir = dir, .num_shards = 2});
  const uint64_t server = Register(v1::ROLE_SERVER, 1, "s:1")->member_id();
  const uint64_t worker = Register(v1::ROLE_WORKER)->member_id();
  const uint64_t gone = Register(v1::ROLE_WORKER)->member_id();
  ASSERT_TRUE(Leave(gone).ok());
  ASSERT_TRUE(Put("k", "v").ok());
  ASSERT_TRUE(Put("k", "v2").ok());
  const v1::View before = scheduler_->CurrentView();
  scheduler_.reset();

  clock_.Advance(absl::Hours(1));  // leases restart in full regardless
  Start({.data_dir = dir, .num_shards = 2});
  v1::View after = scheduler_->CurrentView();
  EXPECT_EQ(after.epoch(), before.epoch());
  EXPECT_EQ(after.workers_epoch(), before.workers_epoch());
  EXPECT_EQ(after.shard_map().version(), before.shard_map().version());
  ASSERT_EQ(after.workers_size(), 1);
  EXPECT_EQ(after.workers(0).id(), worker);
  EXPECT_EQ(after.shard_map().slots(1).member_id(), server);
  scheduler_->CheckLeasesNow();
  EXPECT_TRUE(Heartbeat(worker).ok());
  EXPECT_TRUE(Heartbeat(server).ok());
  EXPECT_EQ(Register(v1::ROLE_WORKER)->member_id(), gone + 1);
  auto got = Get("k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->value(), "v2");
  EXPECT_EQ(got->revision(), 2u);
  EXPECT_EQ(*Put("k", "v3"), 3u);
}

TEST_F(SchedulerTest, BadRequestsAreRejected) {
  Start();
  auto bad_role = Register(v1::ROLE_UNSPECIFIED);
  EXPECT_TRUE(absl::IsInvalidArgument(bad_role.status()));
  EXPECT_THAT(bad_role.status().message(), HasSubstr("role"));
  v1::RegisterRequest req;
  req.set_role(v1::ROLE_WORKER);
  req.set_capacity(-1);
  grpc::ClientContext ctx;
  v1::RegisterResponse resp;
  grpc::Status s = stub_->Register(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("capacity"));
  auto no_address = Register(v1::ROLE_SERVER, 0, "");
  EXPECT_TRUE(no_address.ok());  // the helper fills in an address
  v1::RegisterRequest server;
  server.set_role(v1::ROLE_SERVER);
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub_->Register(&ctx2, server, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::IsInvalidArgument(Put("", "v").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Get("").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Get("k", -1).status()));
}

TEST(SchedulerStartTest, RejectsBadOptions) {
  EXPECT_TRUE(
      absl::IsInvalidArgument(Scheduler::Start({.num_shards = 0}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Scheduler::Start({.consistency = {Consistency::kSsp, -1}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Scheduler::Start({.lease = absl::ZeroDuration()}).status()));
}

TEST(SchedulerStartTest, RefusesADataDirThatIsNotOurs) {
  const std::string dir = TempDir("foreign");
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "precious.txt") << "data";
  auto s = Scheduler::Start({.data_dir = dir});
  EXPECT_TRUE(absl::IsFailedPrecondition(s.status())) << s.status();
  EXPECT_TRUE(fs::exists(fs::path(dir) / "precious.txt"));
}

TEST(SchedulerStartTest, TwoSchedulersCannotShareAPort) {
  auto a = Scheduler::Start({});
  ASSERT_TRUE(a.ok());
  auto b = Scheduler::Start({.listen_address = (*a)->address()});
  EXPECT_TRUE(absl::IsUnavailable(b.status())) << b.status();
}

// The view carries the job's consistency as the servers parse it.
TEST(SchedulerStartTest, ConsistencyIsTheServersSetting) {
  auto s = Scheduler::Start({.consistency = *ParseConsistency("ssp:1000000")});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->CurrentView().consistency(), "ssp:1000000");
  EXPECT_EQ(ParseConsistency((*s)->CurrentView().consistency())->staleness,
            1000000);
}

// A worker whose lease runs out (on the simulated clock) hands its units
// back; the next worker to ask gets them first.
TEST_F(SchedulerTest, ExpiredWorkersUnitsAreHandedOutAgain) {
  Start({.consistency = *ParseConsistency("asp"), .lease = absl::Seconds(10)});
  auto a = Register(v1::ROLE_WORKER);
  auto b = Register(v1::ROLE_WORKER);
  ASSERT_TRUE(a.ok() && b.ok());
  auto la = LeaseWork(a->member_id(), 0);
  auto lb = LeaseWork(b->member_id(), 0);
  ASSERT_TRUE(la.ok() && lb.ok()) << la.status() << lb.status();
  ASSERT_EQ(lb->units_size(), 1);
  EXPECT_EQ(lb->units(0).first(), 4);
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(a->member_id()).ok());
  clock_.Advance(absl::Seconds(6));  // b's lease ran out, a's did not
  scheduler_->CheckLeasesNow();
  auto again = LeaseWork(a->member_id(), 1);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_GE(again->units_size(), 1);
  EXPECT_EQ(again->units(0).id(), lb->units(0).id());
  EXPECT_EQ(again->units(0).first(), 4);
  // b is gone: NOT_FOUND tells it to register again.
  EXPECT_EQ(LeaseWork(b->member_id(), 1).status().code(),
            absl::StatusCode::kNotFound);
}

// A worker that finds every sample of an SSP job handed out is drained in
// the view, under a new epoch (so the servers read it): the SSP gate waits
// for none of its clocks. A sample that comes back to it undrains it.
TEST_F(SchedulerTest, AWorkerWithNothingLeftToLeaseIsDrainedInTheView) {
  Start(
      {.consistency = *ParseConsistency("ssp:1"), .lease = absl::Seconds(10)});
  auto a = Register(v1::ROLE_WORKER);
  auto b = Register(v1::ROLE_WORKER);
  ASSERT_TRUE(a.ok() && b.ok());
  constexpr int64_t kTotal = 12;  // a: 4 + 4, b: 4
  ASSERT_TRUE(LeaseWork(a->member_id(), 0, kTotal).ok());
  ASSERT_TRUE(LeaseWork(b->member_id(), 0, kTotal).ok());
  ASSERT_TRUE(LeaseWork(a->member_id(), 1, kTotal).ok());
  auto drained = [&](uint64_t id) {
    const v1::View view = scheduler_->CurrentView();
    for (const v1::Member& m : view.workers())
      if (m.id() == id) return m.drained();
    ADD_FAILURE() << "worker " << id << " is not in the view";
    return false;
  };
  EXPECT_FALSE(drained(b->member_id()));
  const uint64_t before = scheduler_->CurrentView().epoch();
  EXPECT_EQ(LeaseWork(b->member_id(), 1, kTotal).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(drained(b->member_id()));
  EXPECT_FALSE(drained(a->member_id()));
  EXPECT_EQ(scheduler_->CurrentView().epoch(), before + 1);
  // Asking again changes nothing.
  EXPECT_FALSE(LeaseWork(b->member_id(), 1, kTotal).ok());
  EXPECT_EQ(scheduler_->CurrentView().epoch(), before + 1);
  // a's lease runs out: its samples come back, to b.
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(b->member_id()).ok());
  clock_.Advance(absl::Seconds(6));
  scheduler_->CheckLeasesNow();
  auto back = LeaseWork(b->member_id(), 1, kTotal);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->units_size(), 2);  // both of a's: b alone takes 8
  EXPECT_FALSE(drained(b->member_id()));
}

TEST_F(SchedulerTest, RegisteringAgainNamesAnEarlierMemberAndANewIncarnation) {
  Start();
  auto first = Register(v1::ROLE_WORKER);
  ASSERT_TRUE(first.ok());
  v1::RegisterRequest req;
  req.set_role(v1::ROLE_WORKER);
  for (auto [worker, incarnation] :
       {std::pair<uint64_t, uint64_t>{first->member_id(), 1},
        {99, 2},
        {0, 2}}) {
    req.set_worker(worker);
    req.set_incarnation(incarnation);
    grpc::ClientContext ctx;
    v1::RegisterResponse resp;
    EXPECT_EQ(stub_->Register(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << worker << " " << incarnation;
  }
  req.set_worker(first->member_id());
  req.set_incarnation(2);
  grpc::ClientContext ctx;
  v1::RegisterResponse resp;
  ASSERT_TRUE(stub_->Register(&ctx, req, &resp).ok());
  bool seen = false;
  for (const v1::Member& m : resp.view().workers()) {
    if (m.id() != resp.member_id()) continue;
    seen = true;
    EXPECT_EQ(m.worker(), first->member_id());
    EXPECT_EQ(m.incarnation(), 2u);
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace strata
