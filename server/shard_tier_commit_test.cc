// A deferred BSP commit on a shard with a RAM budget (server/
// shard_deferred.cc, shard_tier.cc): the next step's pulls, waiting at the
// gate while it applies, are served from the tiles it has just updated
// (kept for them past the budget) instead of reading their weights back
// from disk, and the budget holds again once they are served.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/chunk_plan.h"
#include "server/shard.h"
#include "server/shard_test_util.h"
#include "server/shard_tier_test_util.h"
#include "storage/spill_store.h"

namespace strata {
namespace {

using namespace shard_tier_test;  // NOLINT: the helpers of every tier test
using shard_test::MakeView;
using shard_test::Opts;

std::unique_ptr<Shard> OneWorkerShard(std::shared_ptr<SpillStore> spill) {
  ShardOptions o = Opts("bsp");
  o.spill = std::move(spill);
  auto shard = std::make_unique<Shard>(o);
  EXPECT_TRUE(shard->Register(Model()).ok());
  shard->UpdateView(MakeView(1, {1}, 1));
  return shard;
}

v1::PullRequest PullReq(int chunk, int64_t clock) {
  v1::PullRequest r;
  r.set_member_id(1);
  r.set_chunk_id(ChunkId(absl::StrCat("t", chunk), 0));
  r.set_clock(clock);
  return r;
}

// Worker 1's deferred pushes of `step`, every chunk in backward order, as a
// worker clipping its gradient sends them.
void HoldStep(Shard& shard, int64_t step) {
  for (int i = kChunks - 1; i >= 0; --i) {
    v1::PushRequest p = shard_test::PushReq(1, step, 4);
    p.set_chunk_id(ChunkId(absl::StrCat("t", i), 0));
    p.set_deferred(true);
    auto r = shard.Push(p, Gradient(step, 1, i));
    ASSERT_TRUE(r.ok()) << r.status();
  }
}

v1::CommitRequest CommitReq(int64_t step) {
  v1::CommitRequest c;
  c.set_member_id(1);
  c.set_step(step);
  c.set_scale(0.75f);
  c.set_pushes(kChunks);
  return c;
}

TEST(ShardTierCommit, ServesTheNextStepsWaitingPullsFromRam) {
  const ScopedDir dir_scope("commit");
  SpillOptions so;
  so.ram_budget = kChunks * kTile / 4;
  so.dir = dir_scope.path;
  so.eviction = SpillOptions::Eviction::kJustUsed;
  auto tiered = OneWorkerShard(OpenSpill(so));
  auto plain = OneWorkerShard(nullptr);
  for (int64_t step = 0; step < 3; ++step) {
    // The step's pulls, first layers first, then its held pushes.
    for (int i = 0; i < kChunks; ++i) {
      std::string got, want;
      ASSERT_TRUE(tiered->Pull(PullReq(i, step), &got).ok());
      ASSERT_TRUE(plain->Pull(PullReq(i, step), &want).ok());
      ASSERT_EQ(got, want) << "step " << step << " chunk " << i;
    }
    HoldStep(*tiered, step);
    HoldStep(*plain, step);
    ASSERT_TRUE(plain->Commit(CommitReq(step)).ok());
    // The next step's pulls wait at the gate, as a worker's do while its
    // commit applies.
    std::vector<std::string> got(kChunks);
    std::vector<absl::Status> pulled(kChunks);
    std::vector<std::thread> pullers;
    for (int i = 0; i < kChunks; ++i) {
      pullers.emplace_back([&, i] {
        pulled[i] = tiered->Pull(PullReq(i, step + 1), &got[i]).status();
      });
    }
    // (Each pull waits up to the shard's max_wait, 5 s, then fails.)
    const absl::Time give_up = absl::Now() + absl::Seconds(4);
    while (tiered->counters().pulls_waiting.load() < kChunks &&
           absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(tiered->counters().pulls_waiting.load(), kChunks) << [&] {
      for (std::thread& t : pullers) t.join();
      return "not every pull waits at the gate";
    }();
    v1::StatsResponse before;
    tiered->FillStats(&before);
    auto committed = tiered->Commit(CommitReq(step));
    for (std::thread& t : pullers) t.join();
    ASSERT_TRUE(committed.ok()) << committed.status();
    EXPECT_EQ(committed->applied(), static_cast<uint32_t>(kChunks));
    tiered->WaitForTierIo();
    v1::StatsResponse after;
    tiered->FillStats(&after);
    const v1::TierStats &b = before.tier(), &a = after.tier();
    // Three quarters of the tiles were on disk: the commit read each back,
    // and every waiting pull copied its tile before it was spilled again.
    EXPECT_GE(a.misses() - b.misses(), static_cast<uint64_t>(kChunks / 2));
    EXPECT_EQ(a.weight_reads(), b.weight_reads()) << "step " << step;
    // Once they were served, the tiles kept for them were spilled.
    EXPECT_LE(a.resident_bytes(), so.ram_budget);
    EXPECT_GE(a.spilled_bytes(), kChunks * kTile * 3 / 4);
    for (int i = 0; i < kChunks; ++i) {
      ASSERT_TRUE(pulled[i].ok()) << pulled[i];
      std::string want;
      ASSERT_TRUE(plain->Pull(PullReq(i, step + 1), &want).ok());
      EXPECT_EQ(got[i], want) << "step " << step + 1 << " chunk " << i;
    }
  }
}

}  // namespace
}  // namespace strata
