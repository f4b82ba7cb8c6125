#include "model/snapshot_loader.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/gpt.h"
#include "storage/data_dir.h"
#include "storage/ram_tier.h"
#include "strata/v1/ps.pb.h"
#include "testing/storage/test_util.h"

namespace strata {
namespace {

GptConfig Tiny() {
  GptConfig c;
  c.vocab = 16;
  c.context = 8;
  c.layers = 1;
  c.heads = 1;
  c.width = 8;
  return c;
}

std::unique_ptr<Gpt> MakeGpt(uint64_t seed) {
  auto gpt = Gpt::Create(Tiny());
  EXPECT_TRUE(gpt.ok()) << gpt.status();
  (*gpt)->InitParams(seed);
  return std::move(*gpt);
}

// The snapshot of step `step` that server `s` of 2 takes of `gpt`: the first
// half of every parameter on server 0, the second half on server 1. With
// `drop_last`, server `s` leaves out its last chunk.
void WriteSnapshot(const std::string& dir, int s, int64_t step, Gpt& gpt,
                   bool drop_last = false) {
  auto data_dir =
      DataDir::Open(absl::StrCat(dir, "/server-", s), ShardOwnerTag(s));
  ASSERT_TRUE(data_dir.ok()) << data_dir.status();
  RamTier tier;
  const size_t n = gpt.params().size() - (drop_last ? 1 : 0);
  for (size_t i = 0; i < n; ++i) {
    const TensorSpec& t = gpt.params()[i].spec;
    const uint64_t begin = s == 0 ? 0 : t.numel() / 2;
    const uint64_t end = s == 0 ? t.numel() / 2 : t.numel();
    v1::ChunkSpec spec;
    spec.set_tensor(t.name);
    spec.set_offset(begin);
    ChunkRecord rec;
    rec.id = i;
    rec.spec = spec.SerializeAsString();
    const float* w = gpt.param_data(static_cast<int>(i));
    rec.weights.assign(w + begin, w + end);
    ASSERT_TRUE(tier.Put(std::move(rec)).ok());
  }
  ASSERT_TRUE((*data_dir)->WriteSnapshot(step, tier, "").ok());
}

void ExpectSameParams(Gpt& a, Gpt& b) {
  for (size_t i = 0; i < a.params().size(); ++i) {
    const int64_t n = a.params()[i].spec.numel();
    const std::vector<float> x(a.param_data(i), a.param_data(i) + n);
    const std::vector<float> y(b.param_data(i), b.param_data(i) + n);
    ASSERT_EQ(x, y) << a.params()[i].spec.name;
  }
}

TEST(LoadFromSnapshots, TakesTheNewestStepEveryServerHolds) {
  testing::ScopedTempDir tmp;
  auto at10 = MakeGpt(1), at20 = MakeGpt(2);
  WriteSnapshot(tmp.path(), 0, 10, *at10);
  WriteSnapshot(tmp.path(), 1, 10, *at10);
  WriteSnapshot(tmp.path(), 0, 20, *at20);  // server 1 never reached 20
  auto loaded = MakeGpt(3);
  absl::StatusOr<int64_t> step = LoadFromSnapshots(tmp.path(), *loaded);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 10);
  ExpectSameParams(*loaded, *at10);

  WriteSnapshot(tmp.path(), 1, 20, *at20);
  step = LoadFromSnapshots(tmp.path(), *loaded);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 20);
  ExpectSameParams(*loaded, *at20);
}

// `strata export` during a run: the servers hold their directories.
TEST(LoadFromSnapshots, ReadsBesideRunningServersAndLeavesNothing) {
  testing::ScopedTempDir tmp;
  auto at10 = MakeGpt(1);
  WriteSnapshot(tmp.path(), 0, 10, *at10);
  WriteSnapshot(tmp.path(), 1, 10, *at10);
  auto held0 = DataDir::Open(tmp.path() + "/server-0", ShardOwnerTag(0));
  auto held1 = DataDir::Open(tmp.path() + "/server-1", ShardOwnerTag(1));
  ASSERT_TRUE(held0.ok() && held1.ok());
  auto loaded = MakeGpt(3);
  absl::StatusOr<int64_t> step = LoadFromSnapshots(tmp.path(), *loaded);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 10);
  ExpectSameParams(*loaded, *at10);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path()))
    left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"server-0", "server-1"}));
}

TEST(LoadFromSnapshots, RefusesWhatIsNotOneWholeCut) {
  auto gpt = MakeGpt(1);
  {
    testing::ScopedTempDir tmp;
    EXPECT_EQ(LoadFromSnapshots(tmp.path(), *gpt).status().code(),
              absl::StatusCode::kNotFound);
  }
  {
    testing::ScopedTempDir tmp;
    WriteSnapshot(tmp.path(), 0, 10, *gpt);
    WriteSnapshot(tmp.path(), 1, 11, *gpt);
    EXPECT_EQ(LoadFromSnapshots(tmp.path(), *gpt).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  {
    testing::ScopedTempDir tmp;
    WriteSnapshot(tmp.path(), 0, 10, *gpt);
    WriteSnapshot(tmp.path(), 1, 10, *gpt, /*drop_last=*/true);
    absl::Status s = LoadFromSnapshots(tmp.path(), *gpt).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  }
  {
    testing::ScopedTempDir tmp;
    WriteSnapshot(tmp.path(), 0, 10, *gpt);
    WriteSnapshot(tmp.path(), 1, 10, *gpt);
    GptConfig narrow = Tiny();
    narrow.vocab = 8;  // the embedding table is smaller than the snapshot's
    auto other = Gpt::Create(narrow);
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(LoadFromSnapshots(tmp.path(), **other).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace strata
