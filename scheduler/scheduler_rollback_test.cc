// Servers' data-directory leases: a restarted server supersedes its old
// lease, and a server joining a running BSP job rolls it back.

#include <string>

#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

TEST_F(SchedulerTest, AServerJoiningARunningBspJobRollsItBack) {
  Start({.num_shards = 2, .lease = absl::Seconds(10)});
  auto s0 = RegisterServer(*stub_, 0, "dir-0", {});
  auto s1 = RegisterServer(*stub_, 1, "dir-1", {});
  auto w = Register(v1::ROLE_WORKER);
  ASSERT_TRUE(s0.ok() && s1.ok() && w.ok());
  // The job: batch 8, slots 0 and 1; steps 0..5 applied on both slots.
  auto lease = [&](int64_t step) {
    v1::LeaseWorkRequest req;
    req.set_member_id(w->member_id());
    req.set_step(step);
    req.mutable_job()->set_batch(8);
    req.mutable_job()->set_samples_per_epoch(100);
    req.mutable_job()->add_slots(0);
    req.mutable_job()->add_slots(1);
    grpc::ClientContext ctx;
    v1::LeaseWorkResponse resp;
    return FromGrpcStatus(stub_->LeaseWork(&ctx, req, &resp));
  };
  auto report = [&](uint64_t member, int slot, int64_t step,
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
  };
  for (int64_t step = 0; step < 6; ++step) {
    ASSERT_TRUE(lease(step).ok()) << step;
    report(s0->member_id(), 0, step, 0);
    report(s1->member_id(), 1, step, 0);
  }
  // Slot 0 holds snapshots of steps 2 and 4 (its heartbeat says so).
  v1::HeartbeatRequest hb;
  hb.set_member_id(s0->member_id());
  hb.add_snapshots(2);
  hb.add_snapshots(4);
  grpc::ClientContext hb_ctx;
  v1::HeartbeatResponse hb_resp;
  ASSERT_TRUE(stub_->Heartbeat(&hb_ctx, hb, &hb_resp).ok());

  // Slot 1 restarts holding 2 and 6 (6 is past what slot 0 holds; 4 it
  // lacks): the newest step both hold is 2.
  auto restarted = RegisterServer(*stub_, 1, "dir-1", {2, 6});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(restarted->view().generation(), 1u);
  EXPECT_EQ(restarted->view().rollback_step(), 2);
  // The ledger forgot steps 2..5: step 2 is leased again, and a report of
  // the old generation no longer counts.
  EXPECT_TRUE(lease(2).ok());
  EXPECT_EQ(report(s0->member_id(), 0, 2, 0), 0u);
  EXPECT_EQ(report(s0->member_id(), 0, 2, 1), 1u);

  // A server of a slot restarting with no snapshot rolls back to step 0.
  auto fresh = RegisterServer(*stub_, 0, "dir-0", {});
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->view().generation(), 2u);
  EXPECT_EQ(fresh->view().rollback_step(), 0);
}

}  // namespace
}  // namespace strata
