// Hostile traffic at a Shard: requests stamped with a view epoch it has
// not reached, from members it cannot tell from strangers, may wait for
// the view only a few at a time, so a flood of them cannot hold the
// handler threads the job's own pushes need.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "server/shard.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

TEST(ShardFlood, FutureEpochPushesWaitForTheViewAFewAtATime) {
  ShardOptions o = Opts("asp");
  o.view_wait = absl::Seconds(60);  // the waiters wait until the view comes
  o.max_view_waits_per_member = 2;
  o.max_view_waits = 3;
  Shard shard(o);
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  const std::string g = Bytes(std::vector<float>(kN, 1.0f));
  // Four from one unknown member, four from four others, all at epoch 5.
  constexpr int kFlood = 8;
  std::vector<absl::Status> got(kFlood);
  std::atomic<int> answered{0};
  std::vector<std::thread> flood;
  for (int i = 0; i < kFlood; ++i) {
    const uint64_t member = i < 4 ? 99 : 100 + i;
    flood.emplace_back([&, i, member] {
      got[i] = shard.Push(PushReq(member, 0, 1, /*epoch=*/5), g).status();
      answered++;
    });
  }
  // Whatever the order they came in: three wait (two of member 99's at
  // most), five are refused at once.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (answered.load() < 5 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(answered.load(), 5);
  EXPECT_EQ(shard.counters().view_waits.load(), 3u);
  EXPECT_EQ(shard.counters().view_waits_refused.load(), 5u);
  // The job's own workers are served meanwhile.
  auto mine = shard.Push(PushReq(1, 0, 1, /*epoch=*/1), g);
  EXPECT_TRUE(mine.ok()) << mine.status();
  // The view comes, without them: the waiters are not live workers.
  shard.UpdateView(MakeView(5, {1, 2}, 1));
  for (std::thread& t : flood) t.join();
  int unavailable = 0, not_members = 0;
  for (const absl::Status& s : got) {
    unavailable += absl::IsUnavailable(s);
    not_members += absl::IsFailedPrecondition(s);
  }
  EXPECT_EQ(unavailable, 5);
  EXPECT_EQ(not_members, 3);
  EXPECT_EQ(shard.counters().pushes_applied.load(), 1u);
}

// A pull stamped with a rollback generation the shard has not reached is
// held to the same caps.
TEST(ShardFlood, FutureGenerationPullsWaitAFewAtATime) {
  ShardOptions o = Opts("bsp");
  o.view_wait = absl::Seconds(60);
  o.max_view_waits_per_member = 1;
  o.max_view_waits = 8;
  Shard shard(o);
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  std::vector<absl::Status> got(3);
  std::atomic<int> answered{0};
  std::vector<std::thread> pulls;
  for (int i = 0; i < 3; ++i) {
    pulls.emplace_back([&, i] {
      v1::PullRequest r;
      r.set_member_id(1);
      r.set_chunk_id(ChunkId("w", 0));
      r.set_clock(-1);
      r.set_generation(7);
      std::string out;
      got[i] = shard.Pull(r, &out).status();
      answered++;
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (answered.load() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(answered.load(), 2);
  EXPECT_EQ(shard.counters().view_waits_refused.load(), 2u);
  shard.Cancel();  // the one waiting gives up: the server is going down
  for (std::thread& t : pulls) t.join();
  for (const absl::Status& s : got) EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

// Names past 256 bytes and shapes past 16 dimensions are refused, and the
// error quotes only the start of a name (issue: a 3 MiB group name and a
// 1 MiB tensor name were accepted, and an error echoed 3 MiB back).
TEST(ShardFlood, LongNamesAreRefusedAndNotEchoed) {
  Shard shard(Opts("asp"));
  const std::string huge(1 << 20, 'x');
  auto long_group = OneChunk();
  long_group.mutable_groups(0)->set_name(huge);
  long_group.mutable_chunks(0)->set_group(huge);
  auto long_tensor = OneChunk();
  long_tensor.mutable_chunks(0)->set_tensor(huge);
  long_tensor.mutable_chunks(0)->set_chunk_id(ChunkId(huge, 0));
  auto deep = OneChunk();
  for (int d = 0; d < 16; ++d) deep.mutable_chunks(0)->add_tensor_shape(1);
  for (const auto* req : {&long_group, &long_tensor, &deep}) {
    const absl::Status s = shard.Register(*req).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_LT(s.message().size(), 200u) << s.message().substr(0, 300);
  }
  EXPECT_EQ(shard.num_chunks(), 0u);
  // At the limit, a name is fine.
  auto at_limit = OneChunk(std::string(256, 't'));
  EXPECT_TRUE(shard.Register(at_limit).ok());
}

}  // namespace
}  // namespace strata
