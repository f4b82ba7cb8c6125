// One behavioural test suite run against every ChunkTier implementation.
#include "storage/chunk_tier.h"

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "storage/ram_tier.h"
#include "storage/rocksdb_tier.h"
#include "testing/storage/test_util.h"

namespace strata {
namespace {

ChunkRecord MakeRecord(uint64_t id, size_t numel, int slots) {
  ChunkRecord r;
  r.id = id;
  r.version = id * 10;
  r.spec = absl::StrCat("spec-", id);
  for (size_t i = 0; i < numel; ++i) r.weights.push_back(id + 0.25f * i);
  r.slots.assign(slots, std::vector<float>(numel, 0.5f * id));
  return r;
}

struct TierFactory {
  std::string name;
  std::function<std::unique_ptr<ChunkTier>(const std::string& dir)> make;
};

class ChunkTierTest : public ::testing::TestWithParam<TierFactory> {
 protected:
  void SetUp() override { tier_ = GetParam().make(dir_.path()); }
  testing::ScopedTempDir dir_;
  std::unique_ptr<ChunkTier> tier_;
};

TEST_P(ChunkTierTest, PutThenGetReturnsTheRecord) {
  const ChunkRecord r = MakeRecord(7, 100, 2);
  ASSERT_TRUE(tier_->Put(r).ok());
  absl::StatusOr<ChunkRecord> got = tier_->Get(7);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, r);
  EXPECT_EQ(tier_->size(), 1u);
}

TEST_P(ChunkTierTest, MissingIdIsNotFound) {
  EXPECT_EQ(tier_->Get(1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tier_->Delete(1).code(), absl::StatusCode::kNotFound);
}

TEST_P(ChunkTierTest, PutReplacesAndDeleteRemoves) {
  ASSERT_TRUE(tier_->Put(MakeRecord(3, 10, 0)).ok());
  ChunkRecord newer = MakeRecord(3, 20, 1);
  newer.version = 99;
  ASSERT_TRUE(tier_->Put(newer).ok());
  EXPECT_EQ(tier_->size(), 1u);
  EXPECT_EQ(*tier_->Get(3), newer);
  ASSERT_TRUE(tier_->Delete(3).ok());
  EXPECT_EQ(tier_->size(), 0u);
  EXPECT_EQ(tier_->Get(3).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ChunkTierTest, ForEachVisitsAllInIdOrderAndStopsOnError) {
  // Ids whose big-endian and little-endian orders differ.
  for (uint64_t id :
       {uint64_t{1} << 40, uint64_t{256}, uint64_t{1}, ~uint64_t{0}}) {
    ASSERT_TRUE(tier_->Put(MakeRecord(id, 4, 1)).ok());
  }
  std::vector<uint64_t> seen;
  ASSERT_TRUE(tier_
                  ->ForEach([&](const ChunkRecord& r) {
                    seen.push_back(r.id);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(seen,
            (std::vector<uint64_t>{1, 256, uint64_t{1} << 40, ~uint64_t{0}}));
  int calls = 0;
  const absl::Status s = tier_->ForEach([&](const ChunkRecord&) {
    ++calls;
    return absl::AbortedError("stop");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(calls, 1);
}

TEST_P(ChunkTierTest, InconsistentRecordIsRejected) {
  ChunkRecord r = MakeRecord(5, 10, 2);
  r.slots.resize(kMaxStateSlots + 1);
  EXPECT_EQ(tier_->Put(r).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier_->size(), 0u);
}

TEST_P(ChunkTierTest, ConcurrentWritersAndReadersAgree) {
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 50; ++i) {
        const uint64_t id = t * 1000 + i;
        ASSERT_TRUE(tier_->Put(MakeRecord(id, 16, 2)).ok());
        absl::StatusOr<ChunkRecord> got = tier_->Get(id);
        ASSERT_TRUE(got.ok());
        EXPECT_EQ(got->version, id * 10);
        if (i % 2 == 0) {
          ASSERT_TRUE(tier_->Delete(id).ok());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(tier_->size(), 4u * 25);
}

INSTANTIATE_TEST_SUITE_P(
    Tiers, ChunkTierTest,
    ::testing::Values(
        TierFactory{"Ram",
                    [](const std::string&) -> std::unique_ptr<ChunkTier> {
                      return std::make_unique<RamTier>();
                    }},
        TierFactory{"RocksDb",
                    [](const std::string& dir) -> std::unique_ptr<ChunkTier> {
                      auto tier = RocksDbTier::Open(dir, /*create=*/true);
                      EXPECT_TRUE(tier.ok()) << tier.status();
                      return tier.ok() ? std::move(*tier) : nullptr;
                    }}),
    [](const ::testing::TestParamInfo<TierFactory>& info) {
      return info.param.name;
    });

TEST(RamTier, FindGivesStableInPlaceAccess) {
  RamTier tier;
  ASSERT_TRUE(tier.Put(MakeRecord(1, 8, 1)).ok());
  ChunkRecord* r = tier.Find(1);
  ASSERT_NE(r, nullptr);
  r->weights[0] = 123.0f;
  ++r->version;
  for (uint64_t id = 2; id < 100; ++id) {
    ASSERT_TRUE(tier.Put(MakeRecord(id, 1, 0)).ok());
  }
  ASSERT_TRUE(tier.Put(MakeRecord(1, 8, 1)).ok());  // same address
  EXPECT_EQ(tier.Find(1), r);
  EXPECT_EQ(tier.Find(1000), nullptr);
  EXPECT_EQ(tier.Get(1)->weights[0], 1.0f);
}

TEST(RamTier, CountsBytes) {
  RamTier tier;
  const ChunkRecord r = MakeRecord(1, 1000, 2);
  ASSERT_TRUE(tier.Put(r).ok());
  EXPECT_EQ(tier.bytes(), ChunkRecordBytes(r));
  ASSERT_TRUE(tier.Put(MakeRecord(1, 10, 0)).ok());
  EXPECT_EQ(tier.bytes(), ChunkRecordBytes(MakeRecord(1, 10, 0)));
  ASSERT_TRUE(tier.Delete(1).ok());
  EXPECT_EQ(tier.bytes(), 0u);
}

TEST(RocksDbTier, ReopensWithItsRecordsAndRefusesASecondOpener) {
  testing::ScopedTempDir dir;
  {
    auto tier = RocksDbTier::Open(dir.path(), /*create=*/true);
    ASSERT_TRUE(tier.ok()) << tier.status();
    ASSERT_TRUE((*tier)->Put(MakeRecord(9, 50, 2)).ok());
    EXPECT_EQ(RocksDbTier::Open(dir.path(), true).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  auto tier = RocksDbTier::Open(dir.path(), /*create=*/false);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->size(), 1u);
  EXPECT_EQ(*(*tier)->Get(9), MakeRecord(9, 50, 2));
}

TEST(RocksDbTier, AbsentDatabaseIsNotFoundWithoutCreate) {
  testing::ScopedTempDir dir;
  EXPECT_EQ(RocksDbTier::Open(dir.path(), false).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RocksDbTier, CheckpointOpensAsACopy) {
  testing::ScopedTempDir dir;
  auto tier = RocksDbTier::Open(dir.path() + "/live", true);
  ASSERT_TRUE(tier.ok()) << tier.status();
  ASSERT_TRUE((*tier)->Put(MakeRecord(4, 30, 1)).ok());
  ASSERT_TRUE((*tier)->Checkpoint(dir.path() + "/copy").ok());
  ASSERT_TRUE((*tier)->Delete(4).ok());
  auto copy =
      RocksDbTier::Open(dir.path() + "/copy", false, {.read_only = true});
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(*(*copy)->Get(4), MakeRecord(4, 30, 1));
  EXPECT_EQ((*copy)->Put(MakeRecord(5, 1, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace strata
