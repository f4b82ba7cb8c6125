// A shard following a live switch of the job's consistency (--consistency
// auto, server/gate_set.h): from BSP at its fence step to SSP.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/shard.h"
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

}  // namespace
}  // namespace strata
