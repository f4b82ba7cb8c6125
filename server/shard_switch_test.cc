// A shard following a live switch of the job's consistency (--consistency
// auto, server/gate_set.h): from BSP at its fence step to SSP, between
// asynchronous modes, and back to BSP.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/shard.h"
#include "testing/server/shard_tier_util.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

v1::View SwitchedView(uint64_t epoch, const char* mode) {
  v1::View v = MakeView(epoch, {1, 2}, 1);
  v.set_consistency(mode);
  return v;
}

// Worker w's push of its 4 of a step's 8 samples.
v1::PushRequest Req(uint64_t w, int64_t step, uint64_t epoch = 1) {
  v1::PushRequest r = PushReq(w, step, 4, epoch);
  r.set_first_sample(static_cast<uint64_t>(step) * 8 + (w - 1) * 4);
  return r;
}

// After two BSP steps the view says ssp:1: pushes apply at once, a retried
// BSP push is applied once, and each worker starts at clock 2 (the chunk's
// version), so an SSP pull at clock 3 waits for no one and one at clock 4
// waits for the other worker's push of clock 2.
TEST(ShardSwitch, FromBspEveryWorkerStartsAtTheChunksVersion) {
  Shard shard(Opts("bsp", absl::Milliseconds(300)));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  const std::vector<float> g(kN, 1.0f);
  for (int64_t step : {0, 1}) {
    for (uint64_t w : {1, 2}) {
      ASSERT_TRUE(shard.Push(Req(w, step), Bytes(g)).ok());
    }
  }
  uint64_t version = 0;
  const std::vector<float> at_fence = PullNow(shard, 1, -1, &version);
  ASSERT_EQ(version, 2u);
  // An older view naming another mode changes nothing.
  shard.UpdateView(SwitchedView(1, "asp"));
  shard.UpdateView(SwitchedView(2, "ssp:1"));

  auto retry = shard.Push(Req(1, 1, 2), Bytes(g));
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_FALSE(retry->applied());
  EXPECT_EQ(PullNow(shard, 1, -1), at_fence);
  auto next = shard.Push(Req(1, 2, 2), Bytes(g));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->applied());  // alone: SSP does not wait for worker 2
  EXPECT_EQ(next->version(), 3u);
  EXPECT_NE(PullNow(shard, 1, -1), at_fence);

  PullNow(shard, 1, 3);  // worker 2 is at clock 2: within the bound
  v1::PullRequest ahead;
  ahead.set_member_id(1);
  ahead.set_chunk_id(ChunkId("w", 0));
  ahead.set_clock(4);
  std::string out;
  EXPECT_EQ(shard.Pull(ahead, &out).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(shard.Push(Req(2, 2, 2), Bytes(g)).ok());
  ASSERT_TRUE(shard.Pull(ahead, &out).ok());
}

// The job in `mode` at `epoch` with workers `ws`.
v1::View ModeView(uint64_t epoch, std::vector<uint64_t> ws, const char* mode) {
  v1::View v = MakeView(epoch, std::move(ws), 1);
  v.set_consistency(mode);
  return v;
}

// Whether member `w`'s pull at `clock` is served within the gate's wait.
bool Served(Shard& shard, uint64_t w, int64_t clock) {
  v1::PullRequest r;
  r.set_member_id(w);
  r.set_chunk_id(ChunkId("w", 0));
  r.set_clock(clock);
  std::string out;
  const absl::Status s = shard.Pull(r, &out).status();
  EXPECT_TRUE(s.ok() || absl::IsDeadlineExceeded(s)) << s;
  return s.ok();
}

// From ASP to a tighter SSP bound: the drift ASP let the workers build up
// holds no one back, as the bound counts from the switch, for workers
// first seen after it (a joiner at the slowest clock, as it starts) too.
TEST(ShardSwitch, ATighterBoundCountsFromTheSwitch) {
  Shard shard(Opts("asp", absl::Milliseconds(300)));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(ModeView(1, {1, 2}, "asp"));
  const std::vector<float> g(kN, 1.0f);
  for (int64_t step = 0; step < 10; ++step) {
    ASSERT_TRUE(shard.Push(PushReq(1, step, 4), Bytes(g)).ok());
    if (step < 3) {
      ASSERT_TRUE(shard.Push(PushReq(2, step, 4), Bytes(g)).ok());
    }
  }
  // Clocks 10 and 3; under SSP counted from zero, worker 1 would wait for
  // worker 2's next six pushes.
  shard.UpdateView(ModeView(2, {1, 2}, "ssp:1"));
  EXPECT_TRUE(Served(shard, 1, 10));
  EXPECT_TRUE(Served(shard, 1, 11));
  EXPECT_TRUE(Served(shard, 2, 3));
  EXPECT_FALSE(Served(shard, 1, 12));  // one past the bound from the switch
  ASSERT_TRUE(shard.Push(PushReq(2, 3, 4), Bytes(g)).ok());
  ASSERT_TRUE(shard.Push(PushReq(1, 10, 4), Bytes(g)).ok());
  // A retried push of a step before the switch is still found.
  auto retry = shard.Push(PushReq(2, 2, 4), Bytes(g));
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_FALSE(retry->applied());
  // Workers 3 and 4 join at clock 4 (the slowest raw clock); 4 is first
  // seen here by its push, 3 by its pull: each level with the slowest
  // lifted clock, so worker 1 goes on as before...
  shard.UpdateView(ModeView(3, {1, 2, 3, 4}, "ssp:1"));
  ASSERT_TRUE(shard.Push(PushReq(4, 4, 4), Bytes(g)).ok());
  EXPECT_TRUE(Served(shard, 3, 4));
  EXPECT_TRUE(Served(shard, 1, 11));
  // ...and, once every worker is at 11, is held one step past the bound
  // until they go on.
  EXPECT_FALSE(Served(shard, 1, 13));
  ASSERT_TRUE(shard.Push(PushReq(3, 4, 4), Bytes(g)).ok());
  ASSERT_TRUE(shard.Push(PushReq(3, 5, 4), Bytes(g)).ok());
  ASSERT_TRUE(shard.Push(PushReq(2, 4, 4), Bytes(g)).ok());
  ASSERT_TRUE(shard.Push(PushReq(1, 11, 4), Bytes(g)).ok());
  ASSERT_TRUE(shard.Push(PushReq(4, 5, 4), Bytes(g)).ok());
  EXPECT_TRUE(Served(shard, 1, 13));
}

// Back to BSP from SSP: the chunk's version (a count of SSP pushes) moves
// up to the switch's step, a BSP step there closes once both workers push
// it, a retried SSP push is an old step, and the update follows the
// learning-rate schedule at the job's step (the step minus the view's
// schedule_offset), not the version. The tile is spilled at the switch:
// its copy on disk must not keep the old version.
TEST(ShardSwitch, BackToBspTheVersionMovesUpToTheSwitchStep) {
  ShardOptions o = Opts("ssp:1", absl::Milliseconds(300));
  const strata::testing::ScopedDir dir("switch_back");
  // Room for one of the two chunks' tiles (SGD: the weights alone).
  o.spill = shard_tier_test::Spill(dir.path, kN * sizeof(float),
                                   /*background=*/false);
  ASSERT_NE(o.spill, nullptr);
  Shard shard(std::move(o));
  v1::RegisterChunksRequest reg = OneChunk();
  reg.mutable_groups(0)->mutable_optimizer()->set_warmup_steps(10);
  *reg.add_chunks() = OneChunk("v").chunks(0);
  ASSERT_TRUE(shard.Register(reg).ok());
  shard.UpdateView(ModeView(1, {1, 2}, "ssp:1"));
  const std::vector<float> g(kN, 1.0f);
  // Three pushes (versions 1..3), clocks 0, 0 and 1.
  ASSERT_TRUE(shard.Push(PushReq(1, 0, 4), Bytes(g)).ok());
  ASSERT_TRUE(shard.Push(PushReq(2, 0, 4), Bytes(g)).ok());
  ASSERT_TRUE(shard.Push(PushReq(1, 1, 4), Bytes(g)).ok());
  uint64_t version = 0;
  const std::vector<float> before = PullNow(shard, 1, -1, &version);
  ASSERT_EQ(version, 3u);
  // A push to "v" spills "w" (the budget holds one tile).
  v1::PushRequest to_v = PushReq(1, 0, 4);
  to_v.set_chunk_id(ChunkId("v", 0));
  ASSERT_TRUE(shard.Push(to_v, Bytes(g)).ok());

  v1::View back = ModeView(2, {1, 2}, "bsp");
  v1::ConsistencySwitch* sw = back.add_consistency_switches();
  sw->set_from("ssp:1");
  sw->set_to("bsp");
  sw->set_step(7);
  sw->set_schedule_step(5);
  back.set_schedule_offset(2);
  shard.UpdateView(back);
  EXPECT_EQ(PullNow(shard, 1, -1, &version), before);
  EXPECT_EQ(version, 7u);
  // A retried SSP push (clock 1) is an old step now.
  auto retry = shard.Push(PushReq(1, 1, 4, 2), Bytes(g));
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_FALSE(retry->applied());
  // A BSP pull of step 7 is served at once; step 7 closes with both.
  EXPECT_TRUE(Served(shard, 1, 7));
  auto first = shard.Push(Req(1, 7, 2), Bytes(g));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->applied());  // waits for worker 2
  auto second = shard.Push(Req(2, 7, 2), Bytes(g));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->applied());
  EXPECT_EQ(second->version(), 8u);
  // SGD at the schedule's step 5 of a 10-step warm-up: lr 1.0 * 6 / 10.
  const std::vector<float> after = PullNow(shard, 1, 8);
  for (int i = 0; i < kN; ++i) {
    EXPECT_NEAR(after[i], before[i] - 0.6f, 1e-6) << i;
  }
}

}  // namespace
}  // namespace strata
