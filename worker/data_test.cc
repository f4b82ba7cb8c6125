// Token shards, text loading, splits and deterministic sampling.
#include "worker/data.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  static const std::string dir = strata::testing::FreshDir("data_test");
  return (fs::path(dir) / name).string();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(TokenShard, RoundTrips) {
  const std::string path = TempPath("round.tok");
  std::vector<uint16_t> tokens = {0, 1, 50256, 7, 65535};
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());
  EXPECT_EQ(fs::file_size(path), 8u + 4 + 8 + 2 * tokens.size());
  auto read = ReadTokenShard(path, 65536);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, tokens);
}

// Found by fuzz/token_shard_fuzz.cc (an empty body's null pointer went to
// memcpy).
TEST(TokenShard, AnEmptyShardRoundTrips) {
  const std::string path = TempPath("empty.tok");
  ASSERT_TRUE(WriteTokenShard(path, {}).ok());
  auto read = ReadTokenShard(path, 256);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->empty());
}

TEST(TokenShard, RejectsBadMagicTruncationAndLargeTokens) {
  const std::string path = TempPath("bad.tok");
  ASSERT_TRUE(WriteTokenShard(path, {1, 2, 300}).ok());
  const std::string good = ReadBytes(path);

  WriteBytes(path, "STRATOK2" + good.substr(8));
  EXPECT_EQ(ReadTokenShard(path, 512).status().code(),
            absl::StatusCode::kDataLoss);
  WriteBytes(path, good.substr(0, good.size() - 1));
  EXPECT_EQ(ReadTokenShard(path, 512).status().code(),
            absl::StatusCode::kDataLoss);
  WriteBytes(path, good.substr(0, 12));
  EXPECT_EQ(ReadTokenShard(path, 512).status().code(),
            absl::StatusCode::kDataLoss);
  WriteBytes(path, good + "x");
  EXPECT_EQ(ReadTokenShard(path, 512).status().code(),
            absl::StatusCode::kDataLoss);
  WriteBytes(path, good);
  EXPECT_EQ(ReadTokenShard(path, 256).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenShard(TempPath("missing.tok"), 256).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(LoadTokens, ReadsTextFoldersRecursivelyInPathOrder) {
  const std::string dir = TempPath("corpus");
  fs::remove_all(dir);
  WriteBytes(dir + "/b.txt", "BB");
  WriteBytes(dir + "/a/z.txt", "az");
  ASSERT_TRUE(WriteTokenShard(dir + "/c.tok", {1000}).ok());
  auto tokens = LoadTokens(dir, 1024);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, (std::vector<uint16_t>{'a', 'z', 'B', 'B', 1000}));
  EXPECT_FALSE(LoadTokens(dir, 128).ok());  // bytes need vocab >= 256
  EXPECT_EQ(LoadTokens(dir + "/nope", 256).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(PermuteIndex, IsABijectionForManySizes) {
  for (int64_t n : {1, 2, 3, 5, 16, 17, 1000, 4097}) {
    std::set<int64_t> seen;
    for (int64_t i = 0; i < n; ++i) seen.insert(PermuteIndex(i, n, 99));
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
}

std::vector<uint16_t> Counting(int n) {
  std::vector<uint16_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(i % 256);
  return t;
}

TEST(TokenDataset, SplitsOffTheLastTokensForEval) {
  DatasetOptions o;
  o.context = 8;
  auto ds = TokenDataset::Create(Counting(1000), o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_tokens(Split::kTrain), 950);
  EXPECT_EQ((*ds)->num_tokens(Split::kEval), 50);
  EXPECT_EQ((*ds)->num_windows(Split::kTrain), (950 - 9) / 8 + 1);
  for (int64_t s = 0; s < 200; ++s) {
    EXPECT_LE((*ds)->WindowStart(Split::kTrain, 1, s) + 9, 950);
    EXPECT_GE((*ds)->WindowStart(Split::kEval, 1, s), 950);
  }
  EXPECT_FALSE(TokenDataset::Create(Counting(100), o).ok());  // eval too short
}

TEST(TokenDataset, SamplingIsDeterministicAndCoversEachEpoch) {
  DatasetOptions o;
  o.context = 4;
  o.eval_fraction = 0;
  auto ds = TokenDataset::Create(Counting(401), o);
  ASSERT_TRUE(ds.ok());
  const int64_t w = (*ds)->num_windows(Split::kTrain);
  ASSERT_EQ(w, 100);
  std::set<int64_t> epoch0, epoch1;
  std::vector<int64_t> order0, order1;
  for (int64_t s = 0; s < w; ++s) {
    order0.push_back((*ds)->WindowStart(Split::kTrain, 5, s));
    order1.push_back((*ds)->WindowStart(Split::kTrain, 5, w + s));
    epoch0.insert(order0.back());
    epoch1.insert(order1.back());
    EXPECT_EQ(order0.back() % 4, 0);
    EXPECT_EQ((*ds)->WindowStart(Split::kTrain, 5, s), order0.back());
  }
  EXPECT_EQ(epoch0.size(), 100u);
  EXPECT_EQ(epoch1.size(), 100u);
  EXPECT_NE(order0, order1);  // each epoch has its own order
  EXPECT_NE((*ds)->WindowStart(Split::kTrain, 6, 0) +
                (*ds)->WindowStart(Split::kTrain, 6, 1),
            order0[0] + order0[1]);
}

TEST(TokenDataset, BatchTargetsAreTokensShiftedByOne) {
  DatasetOptions o;
  o.context = 6;
  auto ds = TokenDataset::Create(Counting(300), o);
  ASSERT_TRUE(ds.ok());
  std::vector<int32_t> tokens(3 * 6), targets(3 * 6), window(7);
  (*ds)->Batch(Split::kTrain, 9, 10, 3, tokens.data(), targets.data());
  for (int b = 0; b < 3; ++b) {
    (*ds)->Sample(Split::kTrain, 9, 10 + b, window.data());
    for (int t = 0; t < 6; ++t) {
      EXPECT_EQ(tokens[b * 6 + t], window[t]);
      EXPECT_EQ(targets[b * 6 + t], window[t + 1]);
    }
  }
}

}  // namespace
}  // namespace strata
