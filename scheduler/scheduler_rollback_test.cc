// Servers' data-directory leases: a restarted server supersedes its old
// lease, and a server joining a running BSP job rolls it back.

#include <cerrno>
#include <string>
#include <vector>

#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/fault_fs.h"
#include "testing/scheduler/scheduler_fixture.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

TEST_F(SchedulerTest, ARestartedServerSupersedesTheLeaseOfItsDataDirectory) {
  Start();
  auto old = RegisterServer(*stub_, 0, "dir-a", {});
  ASSERT_TRUE(old.ok()) << old.status();
  // Another directory is another server: the slot stays taken.
  EXPECT_EQ(RegisterServer(*stub_, 0, "dir-b", {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RegisterServer(*stub_, 0, "", {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The same directory, a new process: admitted at once, the old lease void.
  auto restarted = RegisterServer(*stub_, 0, "dir-a", {});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  const v1::View view = scheduler_->CurrentView();
  ASSERT_EQ(view.servers_size(), 1);
  EXPECT_EQ(view.servers(0).id(), restarted->member_id());
  EXPECT_EQ(view.shard_map().slots(0).member_id(), restarted->member_id());
  EXPECT_EQ(view.generation(), 0u);  // no job under way: nothing rolls back
  EXPECT_EQ(Heartbeat(old->member_id()).status().code(),
            absl::StatusCode::kNotFound);
  // The old process registering again after its lost lease is refused.
  auto zombie = RegisterServer(*stub_, 0, "dir-a", {}, old->member_id(), 2);
  EXPECT_EQ(zombie.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(zombie.status().message()), HasSubstr("superseded"));
}

// A BSP job of batch 8 over slots 0 and 1 with one worker, and what its
// tests do to it: lease a step, report a slot's update of a step.
class RollbackTest : public SchedulerTest {
 protected:
  // Starts the scheduler (on `data_dir`, "" for none; `replicas` servers
  // a slot at most), registers servers of slots 0 and 1 and a worker, and
  // applies steps 0..5 on both slots.
  void StartJob(const std::string& data_dir = "", int replicas = 1) {
    Start({.data_dir = data_dir,
           .num_shards = 2,
           .replicas = replicas,
           .lease = absl::Seconds(10)});
    auto s0 = RegisterServer(*stub_, 0, "dir-0", {});
    auto s1 = RegisterServer(*stub_, 1, "dir-1", {});
    auto w = Register(v1::ROLE_WORKER);
    ASSERT_TRUE(s0.ok() && s1.ok() && w.ok());
    s0_ = s0->member_id();
    s1_ = s1->member_id();
    worker_ = w->member_id();
    for (int64_t step = 0; step < 6; ++step) {
      ASSERT_TRUE(LeaseStep(step).ok()) << step;
      Report(s0_, 0, step, 0);
      Report(s1_, 1, step, 0);
    }
  }

  absl::Status LeaseStep(int64_t step) {
    v1::LeaseWorkRequest req;
    req.set_member_id(worker_);
    req.set_step(step);
    req.mutable_job()->set_batch(8);
    req.mutable_job()->set_samples_per_epoch(100);
    req.mutable_job()->add_slots(0);
    req.mutable_job()->add_slots(1);
    grpc::ClientContext ctx;
    v1::LeaseWorkResponse resp;
    return FromGrpcStatus(stub_->LeaseWork(&ctx, req, &resp));
  }

  // Returns how many reports the ledger recorded.
  uint64_t Report(uint64_t member, int slot, int64_t step,
                  uint64_t generation) {
    v1::ReportAppliedRequest req;
    req.set_member_id(member);
    v1::AppliedReport* r = req.add_reports();
    r->set_slot(slot);
    r->set_step(step);
    r->set_epoch(scheduler_->CurrentView().workers_epoch());
    r->set_generation(generation);
    grpc::ClientContext ctx;
    v1::ReportAppliedResponse resp;
    EXPECT_TRUE(stub_->ReportApplied(&ctx, req, &resp).ok());
    return resp.recorded();
  }

  // Slot 0's (or `member`'s) heartbeat says it holds snapshots of `held`;
  // returns the answer.
  v1::HeartbeatResponse Holds(std::vector<int64_t> held, uint64_t member = 0) {
    v1::HeartbeatRequest hb;
    hb.set_member_id(member == 0 ? s0_ : member);
    for (int64_t step : held) hb.add_snapshots(step);
    grpc::ClientContext ctx;
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(stub_->Heartbeat(&ctx, hb, &resp).ok());
    return resp;
  }

  uint64_t s0_ = 0, s1_ = 0, worker_ = 0;
};

TEST_F(RollbackTest, AServerJoiningARunningBspJobRollsItBack) {
  StartJob();
  Holds({2, 4});
  // Slot 1 restarts holding 2 and 6 (6 is past what slot 0 holds; 4 it
  // lacks): the newest step both hold is 2.
  auto restarted = RegisterServer(*stub_, 1, "dir-1", {2, 6});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(restarted->view().generation(), 1u);
  EXPECT_EQ(restarted->view().rollback_step(), 2);
  // The ledger forgot steps 2..5: step 2 is leased again, and a report of
  // the old generation no longer counts.
  EXPECT_TRUE(LeaseStep(2).ok());
  EXPECT_EQ(Report(s0_, 0, 2, 0), 0u);
  EXPECT_EQ(Report(s0_, 0, 2, 1), 1u);

  // A server of a slot restarting with no snapshot rolls back to step 0.
  auto fresh = RegisterServer(*stub_, 0, "dir-0", {});
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->view().generation(), 2u);
  EXPECT_EQ(fresh->view().rollback_step(), 0);
}

// Servers learn from their heartbeats the newest snapshot step every server
// holds, which they then keep (storage/data_dir.h): a rollback goes there
// or newer.
TEST_F(RollbackTest, HeartbeatsTellServersTheNewestCommonSnapshot) {
  StartJob();
  // Servers holding no snapshot (a slot without chunks) do not count.
  EXPECT_EQ(Holds({2, 4}).common_snapshot(), 4);
  EXPECT_EQ(Holds({2, 4, 6}, s1_).common_snapshot(), 4);
  EXPECT_EQ(Holds({4, 6, 8}).common_snapshot(), 6);
  EXPECT_FALSE(Holds({10}).has_common_snapshot());  // none in common
}

// A disk that refuses a rollback's write leaves view and ledger as they
// were (the registration fails; nothing is half rolled back), and a
// scheduler restarted on its directory then rolls back both at the next
// registration. (That they are one write, not two, is in the code:
// Register's batch carries the ledger's rollback; a kill between two
// writes is not injected here.)
TEST_F(RollbackTest, ARollbackTheDiskRefusesChangesNeitherViewNorLedger) {
  FaultInjection& faults = FaultInjection::Install();  // before the store
  faults.Clear();
  const std::string dir = TempDir("rollback_fault");
  StartJob(dir);
  Holds({2, 4});
  faults.Add(FaultRule{dir + "/", "", FaultOp::kWrite, EIO, 0, -1});
  auto refused = RegisterServer(*stub_, 1, "dir-1", {2, 6});
  faults.Clear();
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("injected"));
  EXPECT_EQ(scheduler_->CurrentView().generation(), 0u);
  // The ledger still holds step 2 as applied: it is not leased again.
  EXPECT_EQ(LeaseStep(2).code(), absl::StatusCode::kOutOfRange);

  // Restarted on its directory: neither was stored.
  scheduler_->Shutdown();
  scheduler_.reset();
  Start({.data_dir = dir, .num_shards = 2, .lease = absl::Seconds(10)});
  EXPECT_EQ(scheduler_->CurrentView().generation(), 0u);
  EXPECT_EQ(LeaseStep(2).code(), absl::StatusCode::kOutOfRange);
  Holds({2, 4});
  auto restarted = RegisterServer(*stub_, 1, "dir-1", {2, 6});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(restarted->view().generation(), 1u);
  EXPECT_EQ(restarted->view().rollback_step(), 2);
  EXPECT_TRUE(LeaseStep(2).ok());
}

// A server still catching up does not serve its slot: when the slot's
// primary leaves before it caught up, the slot is unserved, and the next
// server to register there rolls the BSP job back as if the slot had
// stood empty; the joiner, which holds nothing, is never promoted.
TEST_F(RollbackTest, AJoinerLeftAloneInItsSlotServesNothing) {
  StartJob("", /*replicas=*/2);
  Holds({2, 4});
  auto joiner = RegisterServer(*stub_, 0, "dir-0b", {});
  ASSERT_TRUE(joiner.ok()) << joiner.status();
  EXPECT_EQ(joiner->view().generation(), 0u);  // slot 0 still serves
  clock_.Advance(absl::Seconds(6));
  Holds({2, 4}, s1_);
  for (uint64_t m : {joiner->member_id(), worker_}) {
    ASSERT_TRUE(Heartbeat(m).ok());
  }
  clock_.Advance(absl::Seconds(5));  // slot 0's primary is 11 s silent
  scheduler_->CheckLeasesNow();
  v1::View view = scheduler_->CurrentView();
  EXPECT_EQ(view.shard_map().slots(0).member_id(), 0u);
  EXPECT_EQ(view.shard_map().slots(0).joining_size(), 1);
  EXPECT_EQ(view.generation(), 0u);
  // The restarted primary holds 2 and 4; the common snapshot leaves the
  // joiner's out (it holds none).
  auto restarted = RegisterServer(*stub_, 0, "dir-0", {2, 4});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(restarted->view().generation(), 1u);
  EXPECT_EQ(restarted->view().rollback_step(), 4);
  EXPECT_EQ(restarted->view().shard_map().slots(0).member_id(),
            restarted->member_id());
}

// A slot's order follows when each server began to serve: a primary
// restarted on its directory while another server was catching up stays
// the primary once that one caught up from it (the joiner's id is lower).
TEST_F(SchedulerTest, ACaughtUpServerComesAfterThePrimaryItCaughtUpFrom) {
  Start({.num_shards = 1, .replicas = 2, .lease = absl::Seconds(10)});
  auto first = RegisterServer(*stub_, 0, "dir-a", {});
  auto joiner = RegisterServer(*stub_, 0, "dir-j", {});
  ASSERT_TRUE(first.ok() && joiner.ok());
  auto restarted = RegisterServer(*stub_, 0, "dir-a", {});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(scheduler_->CurrentView().shard_map().slots(0).member_id(),
            restarted->member_id());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      CaughtUp(joiner->member_id(), first->member_id())));
  ASSERT_TRUE(CaughtUp(joiner->member_id(), restarted->member_id()).ok());
  const v1::ShardSlot slot = scheduler_->CurrentView().shard_map().slots(0);
  EXPECT_EQ(slot.member_id(), restarted->member_id());
  ASSERT_EQ(slot.backups_size(), 1);
  EXPECT_EQ(slot.backups(0).member_id(), joiner->member_id());
}

// Under ASP nothing rolls back: once a slot's primary died while its only
// other server was still catching up, a server registering there is
// refused (it would serve an old state as if it were the job's).
TEST_F(SchedulerTest, AnAspSlotThatLostItsStateRefusesANewPrimary) {
  Start({.num_shards = 1,
         .replicas = 2,
         .consistency = *ParseConsistency("asp"),
         .lease = absl::Seconds(10)});
  auto first = RegisterServer(*stub_, 0, "dir-a", {});
  ASSERT_TRUE(first.ok());
  const uint64_t worker = Register(v1::ROLE_WORKER)->member_id();
  ASSERT_TRUE(LeaseWork(worker, 0).ok());  // the job has begun
  auto joiner = RegisterServer(*stub_, 0, "dir-j", {});
  ASSERT_TRUE(joiner.ok());
  auto restarted = RegisterServer(*stub_, 0, "dir-a", {});
  EXPECT_TRUE(absl::IsFailedPrecondition(restarted.status()))
      << restarted.status();
  EXPECT_THAT(std::string(restarted.status().message()),
              HasSubstr("nothing rolls back"));
}

}  // namespace
}  // namespace strata
