// A deferred BSP commit on a shard with a RAM budget (server/
// deferred_commits.cc, tile_cache.cc): the next step's pulls, waiting at the
// gate while it applies, are served from the tiles it has just updated
// (kept for them past the budget) instead of reading their weights back
// from disk, and the budget holds again once they are served; the commit
// applies the chunks in the order the step's first pulls came.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/chunk_plan.h"
#include "common/parallel.h"
#include "server/shard.h"
#include "storage/spill_store.h"
#include "testing/server/shard_tier_util.h"
#include "testing/server/shard_util.h"

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

// Worker 1 pulls step 0 in a scrambled order, worker 2 in order; worker 2
// commits first, and its pulls of step 1 wait at the gate when worker 1's
// commit closes the step: that commit applies the chunks in the order of
// the step's first pulls (worker 1's), not in that of the later ones. On
// one thread, so the tier's learned order (the order of the tiles' uses)
// is the commit's.
TEST(ShardTierCommit, AppliesAStepInTheOrderOfItsFirstPulls) {
  const int threads = NumThreads();
  SetNumThreads(1);
  absl::Cleanup restore = [threads] { SetNumThreads(threads); };
  const ScopedDir dir_scope("order");
  SpillOptions so;
  so.ram_budget = kChunks * kTile / 4;
  so.dir = dir_scope.path;
  so.eviction = SpillOptions::Eviction::kJustUsed;
  std::shared_ptr<SpillStore> spill = OpenSpill(so);
  ShardOptions o = Opts("bsp");
  o.spill = spill;
  Shard shard(o);
  ASSERT_TRUE(shard.Register(Model()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  std::vector<int> scrambled;
  for (int i = 0; i < kChunks; ++i) scrambled.push_back(i * 7 % kChunks);
  auto pull = [&](uint64_t member, int chunk, int64_t clock) {
    v1::PullRequest r = PullReq(chunk, clock);
    r.set_member_id(member);
    std::string out;
    return shard.Pull(r, &out).status();
  };
  auto hold = [&](uint64_t member) {
    for (int i = kChunks - 1; i >= 0; --i) {
      v1::PushRequest p = shard_test::PushReq(member, 0, member == 1 ? 3 : 5);
      p.set_first_sample(member == 1 ? 0 : 3);
      p.set_chunk_id(ChunkId(absl::StrCat("t", i), 0));
      p.set_deferred(true);
      ASSERT_TRUE(shard.Push(p, Gradient(0, member, i)).ok());
    }
  };
  for (int i : scrambled) ASSERT_TRUE(pull(1, i, 0).ok());
  for (int i = 0; i < kChunks; ++i) ASSERT_TRUE(pull(2, i, 0).ok());
  hold(2);
  v1::CommitRequest commit = CommitReq(0);
  commit.set_member_id(2);
  auto first = shard.Commit(commit);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->applied(), 0u);  // worker 1 has not committed
  std::vector<std::thread> pullers;
  std::vector<absl::Status> pulled(kChunks);
  for (int i = kChunks - 1; i >= 0; --i) {
    pullers.emplace_back([&, i] { pulled[i] = pull(2, i, 1); });
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(4);
  while (shard.counters().pulls_waiting.load() < kChunks &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  hold(1);
  auto closing = shard.Commit(CommitReq(0));
  for (std::thread& t : pullers) t.join();
  ASSERT_TRUE(closing.ok()) << closing.status();
  EXPECT_EQ(closing->applied(), static_cast<uint32_t>(kChunks));
  for (const absl::Status& s : pulled) EXPECT_TRUE(s.ok()) << s;
  std::vector<uint64_t> want;
  for (int k = 2; k < kChunks; ++k) {
    want.push_back(ChunkId(absl::StrCat("t", scrambled[k]), 0));
  }
  EXPECT_EQ(
      spill->Next(ChunkId(absl::StrCat("t", scrambled[1]), 0), kChunks - 2),
      want);
}

}  // namespace
}  // namespace strata
