// A shard with a RAM budget (ShardOptions::spill, server/tile_cache.h):
// the same weights, bit for bit, as a shard holding everything in RAM,
// with most tiles on disk; captures, snapshots and rollbacks of spilled
// tiles; budgets that cannot hold a tile refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/chunk_plan.h"
#include "common/splitmix.h"
#include "server/shard.h"
#include "storage/spill_store.h"
#include "testing/server/shard_tier_util.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using shard_test::MakeView;
using shard_test::Opts;
using namespace shard_tier_test;  // NOLINT: the helpers of every tier test

// BSP steps [from, to) with workers 1 and 2 (3 and 5 samples): each pushes
// every chunk in backward order, then pulls them in forward order. With
// `patient`, each use waits for the read-aheads it started (a worker whose
// compute between uses is longer than a read).
void Train(Shard& shard, int64_t from, int64_t to, uint64_t generation = 0,
           bool patient = false) {
  for (int64_t step = from; step < to; ++step) {
    for (uint64_t w : {1u, 2u}) {
      for (int i = kChunks - 1; i >= 0; --i) {
        v1::PushRequest p = shard_test::PushReq(w, step, w == 1 ? 3 : 5);
        p.set_first_sample(w == 1 ? 0 : 3);
        p.set_chunk_id(ChunkId(absl::StrCat("t", i), 0));
        p.set_generation(generation);
        auto r = shard.Push(p, Gradient(step, w, i));
        ASSERT_TRUE(r.ok()) << r.status();
        if (patient) shard.WaitForTierIo();
      }
    }
    for (uint64_t w : {1u, 2u}) {
      for (int i = 0; i < kChunks; ++i) {
        v1::PullRequest r;
        r.set_member_id(w);
        r.set_chunk_id(ChunkId(absl::StrCat("t", i), 0));
        r.set_clock(step + 1);
        r.set_generation(generation);
        std::string out;
        auto got = shard.Pull(r, &out);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(got->version, static_cast<uint64_t>(step + 1));
        if (patient) shard.WaitForTierIo();
      }
    }
  }
}

// Every record of `a` equals `b`'s, bit for bit, and they hold as many.
void ExpectSameState(const ChunkTier& a, const ChunkTier& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_TRUE(a.ForEach([&](const ChunkRecord& ra) -> absl::Status {
                 auto rb = b.Get(ra.id);
                 EXPECT_TRUE(rb.ok()) << rb.status();
                 if (!rb.ok()) return rb.status();
                 EXPECT_EQ(ra.version, rb->version);
                 EXPECT_EQ(0, std::memcmp(ra.weights.data(), rb->weights.data(),
                                          ra.weights.size() * 4))
                     << "chunk " << ra.id;
                 EXPECT_EQ(ra.slots, rb->slots) << "chunk " << ra.id;
                 return absl::OkStatus();
               }).ok());
}

std::unique_ptr<Shard> NewShard(std::shared_ptr<SpillStore> spill) {
  ShardOptions o = Opts("bsp");
  o.spill = std::move(spill);
  auto shard = std::make_unique<Shard>(o);
  EXPECT_TRUE(shard->Register(Model()).ok());
  shard->UpdateView(MakeView(1, {1, 2}, 1));
  return shard;
}

// `shard`'s state equals that of a shard without a budget trained over
// steps 0..steps-1 as Train does.
void ExpectSameAsNeverSpilled(Shard& shard, int64_t steps) {
  auto plain = NewShard(nullptr);
  Train(*plain, 0, steps);
  auto a = shard.CaptureAll();
  auto b = plain->CaptureAll();
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectSameState(**a, **b);
}

TEST(ShardTier, BudgetOfATenthTrainsToTheSameWeightsBitForBit) {
  const ScopedDir dir_scope("tenth");
  const std::string& dir = dir_scope.path;
  auto spill = Spill(dir, kChunks * kTile / 10);
  auto tiered = NewShard(spill);
  auto plain = NewShard(nullptr);
  Train(*tiered, 0, 6);
  Train(*plain, 0, 6);
  auto a = tiered->CaptureAll();
  auto b = plain->CaptureAll();
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectSameState(**a, **b);

  tiered->WaitForTierIo();
  v1::StatsResponse stats;
  tiered->FillStats(&stats);
  const v1::TierStats& t = stats.tier();
  EXPECT_EQ(t.ram_budget(), kChunks * kTile / 10);
  // Most of the state is on disk, and it was read and written every step.
  EXPECT_GE(t.spilled_bytes(), kChunks * kTile * 8 / 10);
  EXPECT_EQ(t.resident_bytes() + t.spilled_bytes(), kChunks * kTile);
  EXPECT_GT(t.misses() + t.prefetched(), 0u);
  EXPECT_GT(t.read_bytes(), 6 * kTile);
  EXPECT_GT(t.write_bytes(), 6 * kTile);
  EXPECT_EQ(t.write_errors(), 0u);
  // The budget held (a tile in use may pass it by one).
  EXPECT_LE(t.resident_bytes(), t.ram_budget() + kTile);
  // The plain shard reports no tier.
  v1::StatsResponse plain_stats;
  plain->FillStats(&plain_stats);
  EXPECT_FALSE(plain_stats.has_tier());
}

// The tier's stats after step 0 (which teaches the order; its tiles are
// new) and after steps 1 to 3, trained `patient`ly: each use waits for the
// tier's I/O it started, as a worker whose compute between uses outlasts
// a read or a write would.
struct PatientStats {
  v1::TierStats first, after;
};
PatientStats TrainPatiently(Shard& shard) {
  PatientStats out;
  v1::StatsResponse stats;
  Train(shard, 0, 1, 0, /*patient=*/true);
  shard.FillStats(&stats);
  out.first = stats.tier();
  Train(shard, 1, 4, 0, /*patient=*/true);
  shard.FillStats(&stats);
  out.after = stats.tier();
  return out;
}

TEST(ShardTier, ReadsAheadInTheOrderLearnedFromThePreviousStep) {
  const ScopedDir dir_scope("ahead");
  // Write-behind off: the writer thread locking a tile a read-ahead would
  // spill makes that read-ahead look further or give up, by timing.
  SpillOptions o;
  o.ram_budget = kChunks * kTile / 4;
  o.dir = dir_scope.path;
  o.write_behind = false;
  auto store = SpillStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  auto shard = NewShard(std::shared_ptr<SpillStore>(*std::move(store)));
  // Tiles are read ahead of the updates: after the first step nearly every
  // closing push finds its tile in RAM. Pulls of spilled tiles read their
  // weights alone and bring no tile in: the misses counted as weight reads.
  const auto [first, after] = TrainPatiently(*shard);
  const uint64_t uses =
      after.hits() + after.misses() - first.hits() - first.misses();
  const uint64_t pulls = 3 * 2 * kChunks;  // steps 1-3, two workers
  const uint64_t push_misses = (after.misses() - after.weight_reads()) -
                               (first.misses() - first.weight_reads());
  EXPECT_GT(after.prefetched(), first.prefetched());
  EXPECT_GT(after.weight_reads(), first.weight_reads());
  // (Without read-ahead every one misses, least recently used spilling
  // each tile before it comes round. Under load up to 4 a step have missed:
  // read-aheads issued as the previous step ended.)
  EXPECT_LT(push_misses * 8, uses - pulls)
      << push_misses << " of " << uses - pulls << " pushes";
}

TEST(ShardTier, PullsOfSpilledTilesReadTheirWeightsAloneAndLeaveThemOnDisk) {
  const ScopedDir dir_scope("pulls");
  auto spill = Spill(dir_scope.path, kChunks * kTile / 4, /*background=*/false);
  auto tiered = NewShard(spill);
  auto plain = NewShard(nullptr);
  Train(*tiered, 0, 2);
  Train(*plain, 0, 2);
  v1::StatsResponse before;
  tiered->FillStats(&before);
  int spilled = 0;
  for (int i = 0; i < kChunks; ++i) {
    v1::PullRequest r;
    r.set_member_id(1);
    r.set_chunk_id(ChunkId(absl::StrCat("t", i), 0));
    r.set_clock(2);
    std::string got, want;
    ASSERT_TRUE(tiered->Pull(r, &got).ok());
    ASSERT_TRUE(plain->Pull(r, &want).ok());
    EXPECT_EQ(got, want) << "chunk " << i;
  }
  v1::StatsResponse after;
  tiered->FillStats(&after);
  const v1::TierStats &b = before.tier(), &a = after.tier();
  spilled = static_cast<int>(a.weight_reads() - b.weight_reads());
  // Three quarters of the tiles are on disk; each pull of one read its
  // weights (and spec), a third of the tile, and left it there.
  EXPECT_GE(spilled, kChunks / 2);
  EXPECT_EQ(a.misses() - b.misses(), static_cast<uint64_t>(spilled));
  EXPECT_EQ(a.hits() - b.hits(), static_cast<uint64_t>(kChunks - spilled));
  const uint64_t read = a.read_bytes() - b.read_bytes();
  EXPECT_GE(read, spilled * kNumel * 4u);
  EXPECT_LT(read, spilled * (kNumel * 4u + 1024));
  EXPECT_EQ(a.resident_bytes(), b.resident_bytes());
  EXPECT_EQ(a.spilled_bytes(), b.spilled_bytes());
  EXPECT_EQ(a.write_bytes(), b.write_bytes());
}

TEST(ShardTier, SpillingTheTileNeededLastReadsFewerTiles) {
  // Each step's closing pushes (worker 2's: worker 1's leave the tiles
  // where they are) use the tiles in the same order. Least recently used
  // spills each just before it comes round again: every closing push
  // reads its tile. Spilling the one needed last keeps the budget's tiles
  // resident each cycle (a BSP push makes room after its use, so the tile
  // it read is spilled, not one kept): a quarter fewer reads with a
  // quarter of the tiles in the budget. Read-ahead and write-behind off,
  // so the reads are the policy's alone. Spilling the tile used last does
  // the same here without learning the order: each tile comes round once
  // per step.
  using E = SpillOptions::Eviction;
  enum Policy { kLru, kFarthest, kJustUsed };
  const E policies[] = {E::kLeastRecent, E::kFarthest, E::kJustUsed};
  uint64_t reads[3];
  for (Policy p : {kLru, kFarthest, kJustUsed}) {
    const ScopedDir dir_scope(absl::StrCat("policy", p));
    auto shard = NewShard(Spill(dir_scope.path, kChunks * kTile / 4,
                                /*background=*/false, policies[p]));
    v1::StatsResponse first, after;
    Train(*shard, 0, 1);
    shard->FillStats(&first);
    Train(*shard, 1, 4);
    shard->FillStats(&after);
    reads[p] = (after.tier().misses() - after.tier().weight_reads()) -
               (first.tier().misses() - first.tier().weight_reads());
    // Whichever, the weights are those of a shard that never spilled.
    ExpectSameAsNeverSpilled(*shard, 4);
  }
  EXPECT_EQ(reads[kLru], 3u * kChunks);
  EXPECT_EQ(reads[kFarthest], 3u * (kChunks - kChunks / 4));
  EXPECT_EQ(reads[kJustUsed], 3u * (kChunks - kChunks / 4));
}

TEST(ShardTier, WritesBehindSoThatSpillsOnlyFree) {
  const ScopedDir dir_scope("behind");
  // Least recently used: the tiles next to be spilled are the coldest,
  // changed long before their room is needed. (Spilling the tile needed
  // last instead spills the tile just changed, whose write the read-ahead
  // that needs its room races the writer thread for.) Read-ahead off: its
  // tasks need room as soon as a use ends, before the writer has run, and
  // every resident tile is changed each step (only a step's closing push
  // brings a tile in), so with it most spills still write (end to end,
  // 35-41% of tile writes were made behind when it was measured).
  SpillOptions o;
  o.ram_budget = kChunks * kTile / 4;
  o.dir = dir_scope.path;
  o.prefetch_depth = 0;
  auto store = SpillStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  auto shard = NewShard(std::shared_ptr<SpillStore>(*std::move(store)));
  // The coldest changed tiles are written out on the writer thread before
  // anything needs their room: after the first step, a spill only frees
  // memory.
  const auto [first, after] = TrainPatiently(*shard);
  const uint64_t behind = after.written_behind() - first.written_behind();
  const uint64_t inline_writes =
      after.spills_written() - first.spills_written();
  // Each step changes every tile and most of them go to disk.
  EXPECT_GE(behind, 3u * kChunks / 2) << inline_writes << " inline";
  EXPECT_LT(inline_writes * 10, behind) << inline_writes << " inline";
  // Every write was one of the two (a record is its tile and a header).
  const uint64_t written = after.write_bytes() - first.write_bytes();
  EXPECT_GE(written, (behind + inline_writes) * kTile);
  EXPECT_LT(written, (behind + inline_writes) * (kTile + 1024));
  // And the weights are those of a shard that never spilled.
  ExpectSameAsNeverSpilled(*shard, 4);
}

TEST(ShardTier, SpilledChunksSnapshotAndRollBackBitForBit) {
  const ScopedDir dir_scope("rollback");
  const std::string& dir = dir_scope.path;
  auto spill = Spill(dir, kChunks * kTile / 10);
  auto shard = NewShard(spill);
  Train(*shard, 0, 3);
  auto at3 = shard->CaptureAll();  // on the spill disk
  ASSERT_TRUE(at3.ok()) << at3.status();
  const std::string meta = shard->GroupsMetadata();
  Train(*shard, 3, 5);
  ASSERT_TRUE(shard->RollBack(1, 3, &meta, at3->get()).ok());
  auto after = shard->CaptureAll();
  ASSERT_TRUE(after.ok());
  ExpectSameState(**at3, **after);
  // And it trains on from there as a shard that never spilled.
  Train(*shard, 3, 5, /*generation=*/1);
  ExpectSameAsNeverSpilled(*shard, 5);
}

TEST(ShardTier, AutoSnapshotsOfASpilledShardAreComplete) {
  const ScopedDir dir_scope("snap");
  const std::string& dir = dir_scope.path;
  ShardOptions o = Opts("bsp");
  o.snapshot_every = 2;
  o.spill = Spill(dir, kChunks * kTile / 10);
  Shard shard(o);
  ASSERT_TRUE(shard.Register(Model()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  std::unique_ptr<ChunkTier> got;
  shard.set_snapshot_sink(
      [&](uint64_t, int64_t step, std::unique_ptr<ChunkTier> capture) {
        if (step == 4) got = std::move(capture);
      });
  Train(shard, 0, 4);
  ASSERT_NE(got, nullptr);
  auto plain = NewShard(nullptr);
  Train(*plain, 0, 4);
  auto b = plain->CaptureAll();
  ASSERT_TRUE(b.ok());
  ExpectSameState(*got, **b);
  got.reset();
}

TEST(ShardTier, ABudgetSmallerThanOneTileRefusesTheChunk) {
  const ScopedDir dir_scope("small");
  const std::string& dir = dir_scope.path;
  ShardOptions o = Opts("bsp");
  o.spill = Spill(dir, kTile - 1);
  Shard shard(o);
  auto r = shard.Register(Model());
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("RAM budget"), std::string::npos)
      << r.status();
  EXPECT_EQ(shard.num_chunks(), 0u);
}

TEST(ShardTier, ASpillTileThatCannotBeReadIsDataLossNotGarbage) {
  const ScopedDir dir_scope("lost");
  const std::string& dir = dir_scope.path;
  auto spill = Spill(dir, kChunks * kTile / 10, /*background=*/false);
  auto shard = NewShard(spill);
  Train(*shard, 0, 1);
  // Replace a spilled tile with one of another version, as a corrupt or
  // stale spill database would hold. t10 was pulled long before the last
  // pulls (t36..t39 fill the budget): it is on disk.
  const uint64_t victim = ChunkId("t10", 0);
  auto before = shard->CaptureAll();
  ASSERT_TRUE(before.ok());
  ChunkRecord stale = (*before)->Get(victim).value();
  stale.version = 99;
  ASSERT_TRUE(spill->Write(stale).ok());
  v1::PullRequest r;
  r.set_member_id(1);
  r.set_chunk_id(victim);
  r.set_clock(1);
  std::vector<absl::Status> lost;
  shard->set_lost_state_sink([&](const absl::Status& s) { lost.push_back(s); });
  std::string out;
  auto got = shard->Pull(r, &out);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  // The server is told (it stops: a restart restores its snapshot).
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0], got.status());
}

}  // namespace
}  // namespace strata
