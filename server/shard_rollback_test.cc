// Shard::RollBack: a running shard put back to a snapshot (or to the
// initial weights) in a new generation, and requests of other generations.
#include <gtest/gtest.h>

#include <thread>

#include "server/shard.h"
#include "storage/ram_tier.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

// Closes BSP steps [from, to) of worker 1 alone with gradient 1 each (SGD,
// lr 1: the weights fall by 1 per step).
void Steps(Shard& shard, int64_t from, int64_t to, uint64_t generation) {
  for (int64_t s = from; s < to; ++s) {
    v1::PushRequest p = PushReq(1, s, 1);
    p.set_generation(generation);
    ASSERT_TRUE(shard.Push(p, Bytes(std::vector<float>(kN, 1.0f))).ok()) << s;
  }
}

absl::StatusOr<PullResult> PullIn(Shard& shard, int64_t clock,
                                  uint64_t generation, std::string* out) {
  v1::PullRequest r;
  r.set_member_id(1);
  r.set_chunk_id(ChunkId("w", 0));
  r.set_clock(clock);
  r.set_generation(generation);
  return shard.Pull(r, out);
}

TEST(ShardRollBack, RestoresTheSnapshotAndRefusesOlderGenerations) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  Steps(shard, 0, 3, 0);
  std::unique_ptr<ChunkTier> at3 = shard.CaptureAll().value();
  const std::string meta = shard.GroupsMetadata();
  Steps(shard, 3, 7, 0);
  std::string out;
  ASSERT_EQ(PullIn(shard, 7, 0, &out)->version, 7u);

  ASSERT_TRUE(shard.RollBack(1, 3, &meta, at3.get()).ok());
  EXPECT_EQ(shard.generation(), 1u);
  // The state of step 3, served to generation 1 only.
  absl::StatusOr<PullResult> back = PullIn(shard, 3, 1, &out);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->version, 3u);
  EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(out.data())[0], -3.0f);
  EXPECT_EQ(PullIn(shard, 3, 0, &out).status().code(),
            absl::StatusCode::kAborted);
  // A push computed before the rollback is not applied.
  v1::PushRequest old = PushReq(1, 3, 1);
  EXPECT_EQ(
      shard.Push(old, Bytes(std::vector<float>(kN, 1.0f))).status().code(),
      absl::StatusCode::kAborted);
  // A newer generation than the shard's waits, then asks for a retry.
  EXPECT_EQ(PullIn(shard, 3, 2, &out).status().code(),
            absl::StatusCode::kUnavailable);
  // The job goes on from step 3 in generation 1.
  Steps(shard, 3, 5, 1);
  back = PullIn(shard, 5, 1, &out);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(out.data())[0], -5.0f);
  v1::StatsResponse stats;
  shard.FillStats(&stats);
  EXPECT_EQ(stats.aborted_rolled_back(), 2u);
  EXPECT_EQ(stats.generation(), 1u);
  // A generation not newer is refused.
  EXPECT_EQ(shard.RollBack(1, 3, &meta, at3.get()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ShardRollBack, StepZeroIsTheInitialWeightsAndWakesWaitingPulls) {
  Shard shard(Opts("bsp", absl::Seconds(60)));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  std::string out;
  ASSERT_TRUE(PullIn(shard, 0, 0, &out).ok());
  const std::string initial = out;
  v1::PushRequest p = PushReq(1, 0, 1);
  ASSERT_TRUE(shard.Push(p, Bytes(std::vector<float>(kN, 1.0f))).ok());
  p.set_member_id(2);
  ASSERT_TRUE(shard.Push(p, Bytes(std::vector<float>(kN, 1.0f))).ok());
  // Worker 1 pushed step 1; its pull of version 2 waits for worker 2.
  p = PushReq(1, 1, 1);
  ASSERT_TRUE(shard.Push(p, Bytes(std::vector<float>(kN, 1.0f))).ok());
  absl::Status waited;
  std::thread waiter([&] {
    std::string w;
    waited = PullIn(shard, 2, 0, &w).status();
  });
  WaitForPullsAtTheGate(shard, 1);
  ASSERT_TRUE(shard.RollBack(1, 0, nullptr, nullptr).ok());
  waiter.join();  // would wait the full 60 s without the rollback
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted);
  absl::StatusOr<PullResult> back = PullIn(shard, 0, 1, &out);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->version, 0u);
  EXPECT_EQ(out, initial);
  // The open step's push of worker 1 was dropped: step 0 needs both again.
  p = PushReq(1, 0, 1);
  p.set_generation(1);
  ASSERT_TRUE(shard.Push(p, Bytes(std::vector<float>(kN, 1.0f))).ok());
  ASSERT_TRUE(PullIn(shard, 0, 1, &out).ok());
  v1::StatsResponse stats;
  shard.FillStats(&stats);
  EXPECT_EQ(stats.chunk_versions().at(ChunkId("w", 0)), 0u);
}

TEST(ShardRollBack, ASnapshotThatLacksAChunkChangesNothing) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk("w")).ok());
  std::unique_ptr<ChunkTier> only_w = shard.CaptureAll().value();
  const std::string meta = shard.GroupsMetadata();
  ASSERT_TRUE(shard.Register(OneChunk("v")).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  Steps(shard, 0, 2, 0);
  const absl::Status s = shard.RollBack(1, 0, &meta, only_w.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(shard.generation(), 0u);
  std::string out;
  EXPECT_EQ(PullIn(shard, 2, 0, &out)->version, 2u);
}

TEST(ShardRollBack, ChunksRegisteredAfterARollbackAreInItsGeneration) {
  // A restarted server that held no snapshot: empty when the job rolls back
  // to step 0, its chunks declared by the workers afterwards.
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.RollBack(3, 0, nullptr, nullptr).ok());
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  Steps(shard, 0, 2, 3);
  std::string out;
  absl::StatusOr<PullResult> pulled = PullIn(shard, 2, 3, &out);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->version, 2u);
  EXPECT_EQ(PullIn(shard, 2, 2, &out).status().code(),
            absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace strata
