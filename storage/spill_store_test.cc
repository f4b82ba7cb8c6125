// SpillStore: its books (LRU, learned order, budget), tile I/O and byte
// sizes; the shard's use of it is tested in server/shard_tier_test.cc.
#include "storage/spill_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "testing/temp_dir.h"

namespace strata {
namespace {

using ::strata::testing::ScopedDir;

std::unique_ptr<SpillStore> Open(
    const std::string& dir, uint64_t budget,
    SpillOptions::Eviction eviction = SpillOptions::Eviction::kLeastRecent) {
  SpillOptions o;
  o.dir = dir;
  o.ram_budget = budget;
  o.eviction = eviction;
  auto s = SpillStore::Open(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(SpillStore, KeepsLeastRecentlyUsedOrderAndTheBudget) {
  const ScopedDir dir_scope("lru");
  const std::string& dir = dir_scope.path;
  auto s = Open(dir, 300);
  s->Admit(1, 100, false);
  s->Admit(2, 100, false);
  s->Admit(3, 100, false);
  EXPECT_FALSE(s->OverBudget(0));
  EXPECT_TRUE(s->OverBudget(1));
  s->Touch(1);  // 2 is now the coldest
  EXPECT_EQ(s->Victims(2), (std::vector<uint64_t>{2, 3}));
  s->Release(2);
  EXPECT_EQ(s->counters().resident_bytes, 200u);
  EXPECT_EQ(s->counters().spilled_bytes, 100u);
  s->Admit(2, 100, /*was_spilled=*/true);
  EXPECT_EQ(s->counters().spilled_bytes, 0u);
  EXPECT_EQ(s->Victims(3), (std::vector<uint64_t>{3, 1, 2}));
}

// Uses of tiles n-1..0 (a backward pass's order) `cycles` times through
// the store's books, as the shard makes them (Admit on a miss, then Touch),
// with room for `budget` tiles: a miss with no room spills Victims(1).
// Returns the misses of the last cycle.
int MissesPerCycle(SpillStore& s, int n, size_t budget, int cycles) {
  std::set<uint64_t> resident;
  int misses = 0;
  for (int c = 0; c < cycles; ++c) {
    misses = 0;
    for (int i = n - 1; i >= 0; --i) {
      const uint64_t id = i;
      if (!resident.contains(id)) {
        ++misses;
        if (resident.size() == budget) {
          const uint64_t victim = s.Victims(1).at(0);
          s.Release(victim);
          resident.erase(victim);
        }
        s.Admit(id, 100, /*was_spilled=*/c > 0);
        resident.insert(id);
      }
      s.Touch(id);
    }
  }
  return misses;
}

TEST(SpillStore, SpillingTheTileNeededLastMissesLessOftenInACycle) {
  // 10 tiles used in the same order every step, room for 3. Least recently
  // used spills each tile just before it comes round: every use misses.
  // Spilling the one needed farthest ahead (the one just used) keeps two
  // of the three resident each cycle: 10 - 3 + 1 misses.
  const ScopedDir lru_dir("cycle-lru"), dir("cycle");
  auto lru = Open(lru_dir.path, 300);
  EXPECT_EQ(MissesPerCycle(*lru, 10, 3, 4), 10);
  auto farthest = Open(dir.path, 300, SpillOptions::Eviction::kFarthest);
  EXPECT_EQ(MissesPerCycle(*farthest, 10, 3, 4), 8);
  // Spilling the one used last does the same without the learned order.
  const ScopedDir just_used_dir("cycle-just-used");
  auto just_used =
      Open(just_used_dir.path, 300, SpillOptions::Eviction::kJustUsed);
  EXPECT_EQ(MissesPerCycle(*just_used, 10, 3, 4), 8);
}

// The tile used last goes first, whatever the order of use, and a tile
// read ahead last until its use; nothing is written behind with that
// policy, and nothing read ahead unless asked.
TEST(SpillStore, SpillingTheTileUsedLastGoesMostRecentFirst) {
  const ScopedDir dir("just-used");
  auto s = Open(dir.path, 400, SpillOptions::Eviction::kJustUsed);
  for (uint64_t id : {1, 2, 3}) s->Admit(id, 100, false);
  s->Touch(2);
  s->Touch(1);
  EXPECT_EQ(s->Victims(3), (std::vector<uint64_t>{1, 2, 3}));
  s->Touch(3);
  EXPECT_EQ(s->VictimsCovering(150), (std::vector<uint64_t>{3, 1}));
  s->Admit(4, 100, /*was_spilled=*/false, /*read_ahead=*/true);
  EXPECT_EQ(s->Victims(4), (std::vector<uint64_t>{3, 1, 2, 4}));
  s->Touch(4);
  EXPECT_EQ(s->Victims(4), (std::vector<uint64_t>{4, 3, 1, 2}));
  EXPECT_EQ(s->prefetch_depth(), 0);
  EXPECT_FALSE(s->write_behind());
  const ScopedDir lru_dir("just-used-lru");
  auto lru = Open(lru_dir.path, 300);
  EXPECT_EQ(lru->prefetch_depth(), 4);
  EXPECT_TRUE(lru->write_behind());
  // Under LRU a tile read ahead is the most recently admitted.
  for (uint64_t id : {1, 2}) lru->Admit(id, 100, false);
  lru->Admit(3, 100, /*was_spilled=*/false, /*read_ahead=*/true);
  EXPECT_EQ(lru->Victims(3), (std::vector<uint64_t>{1, 2, 3}));
  const ScopedDir asked_dir("just-used-asked");
  SpillOptions asked;
  asked.ram_budget = 300;
  asked.dir = asked_dir.path;
  asked.eviction = SpillOptions::Eviction::kJustUsed;
  asked.prefetch_depth = 3;
  auto ahead = SpillStore::Open(asked);
  ASSERT_TRUE(ahead.ok()) << ahead.status();
  EXPECT_EQ((*ahead)->prefetch_depth(), 3);
  asked.prefetch_depth = -2;
  EXPECT_EQ(SpillStore::Open(asked).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SpillStore, WritesAndReadsTilesBitForBit) {
  const ScopedDir dir_scope("io");
  const std::string& dir = dir_scope.path;
  auto s = Open(dir, 1000);
  ChunkRecord t;
  t.id = 42;
  t.version = 7;
  t.spec = "spec";
  t.weights = {1.5f, -0.0f, 3e38f};
  t.slots = {{1, 2, 3}, {4, 5, 6}};
  ASSERT_TRUE(s->Write(t).ok());
  auto back = s->Read(42);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, t);
  EXPECT_EQ(s->Read(43).status().code(), absl::StatusCode::kDataLoss);
  // The arrays' and spec's bytes, each counted once.
  const uint64_t bytes = 9 * sizeof(float) + t.spec.size();
  EXPECT_EQ(s->counters().write_bytes, bytes);
  EXPECT_EQ(s->counters().read_bytes, bytes);
  // The weights alone: their bytes and the spec's, and the version.
  auto weights = s->ReadWeights(42);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ(weights->version, 7u);
  EXPECT_EQ(weights->spec, "spec");
  EXPECT_EQ(0, std::memcmp(weights->weights.data(), t.weights.data(), 12));
  EXPECT_TRUE(weights->slots.empty());
  EXPECT_EQ(s->counters().read_bytes, bytes + 3 * sizeof(float) + 4);
  EXPECT_EQ(s->ReadWeights(43).status().code(), absl::StatusCode::kDataLoss);
  // A tile without state (SGD) goes and comes back as it was.
  ChunkRecord sgd;
  sgd.id = 5;
  sgd.version = 2;
  sgd.weights = {1, 2};
  ASSERT_TRUE(s->Write(sgd).ok());
  EXPECT_EQ(*s->Read(5), sgd);
}

TEST(SpillStore, StartsEmptyEachTime) {
  const ScopedDir dir_scope("fresh");
  const std::string& dir = dir_scope.path;
  {
    auto s = Open(dir, 1000);
    ChunkRecord t;
    t.id = 1;
    t.weights = {1};
    ASSERT_TRUE(s->Write(t).ok());
  }
  auto s = Open(dir, 1000);
  EXPECT_EQ(s->Read(1).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SpillStore, RefusesBadOptionsAndUnusableDirectories) {
  SpillOptions o;
  const ScopedDir bad("bad");
  o.dir = bad.path;
  o.ram_budget = 0;
  EXPECT_EQ(SpillStore::Open(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.ram_budget = 100;
  o.dir = "";
  EXPECT_EQ(SpillStore::Open(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A path under a regular file cannot be a directory (whoever we run as).
  const ScopedDir file_scope("file");
  const std::string& file = file_scope.path;
  std::ofstream(file) << "x";
  o.dir = file + "/spill";
  auto s = SpillStore::Open(o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(file), std::string::npos) << s.status();
}

TEST(SpillStore, ScratchTiersGoWithTheirFiles) {
  const ScopedDir dir_scope("scratch");
  const std::string& dir = dir_scope.path;
  auto s = Open(dir, 1000);
  std::string path;
  {
    auto scratch = s->NewScratch();
    ASSERT_TRUE(scratch.ok()) << scratch.status();
    ChunkRecord t;
    t.id = 3;
    t.weights = {1, 2};
    ASSERT_TRUE((*scratch)->Put(t).ok());
    EXPECT_EQ((*scratch)->Get(3)->weights, t.weights);
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().filename().string().rfind("scratch-", 0) == 0)
        path = e.path().string();
    EXPECT_FALSE(path.empty());
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace strata
