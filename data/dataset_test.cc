// Token shards (Strata's, llm.c's, nanoGPT's), text loading, validation
// shards, splits and deterministic sampling.
#include "data/dataset.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "data/token_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// <the test's folder>/name, its parent folder made.
std::string TempPath(const std::string& name) {
  static const std::string dir = strata::testing::FreshDir("data_test");
  const fs::path path = fs::path(dir) / name;
  fs::create_directories(path.parent_path());
  return path.string();
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

// --- Shards from llm.c and nanoGPT -------------------------------------

using ::testing::AllOf;
using ::testing::HasSubstr;

// `v` as 4 little-endian bytes.
std::string Le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

// `tokens` as little-endian uint16, nanoGPT's train.bin layout.
std::string Le16(const std::vector<uint16_t>& tokens) {
  std::string s;
  for (uint16_t t : tokens) {
    s.push_back(static_cast<char>(t & 0xff));
    s.push_back(static_cast<char>(t >> 8));
  }
  return s;
}

// An llm.c shard, written out field by field: 256 int32 (magic, version,
// count, zeros), then `body`.
std::string LlmcBytes(int32_t magic, int32_t version, int32_t count,
                      const std::string& body) {
  std::string s = Le32(magic) + Le32(version) + Le32(count);
  s.resize(1024, '\0');
  return s + body;
}

std::string LlmcBytes(const std::vector<uint16_t>& tokens) {
  return LlmcBytes(20240520, 1, static_cast<int32_t>(tokens.size()),
                   Le16(tokens));
}

// n tokens all equal to `value`.
std::vector<uint16_t> Filled(int n, uint16_t value) {
  return std::vector<uint16_t>(n, value);
}

DatasetOptions Context(int context, double eval_fraction = 0.05) {
  DatasetOptions o;
  o.context = context;
  o.eval_fraction = eval_fraction;
  return o;
}

// Every window of an epoch of `split`, as tokens.
std::vector<std::vector<int32_t>> Windows(const TokenDataset& ds, Split split) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t s = 0; s < ds.num_windows(split); ++s) {
    out.emplace_back(ds.context() + 1);
    ds.Sample(split, 7, s, out.back().data());
  }
  return out;
}

TEST(LlmcShard, ReadsWhatWasWrittenFieldByField) {
  const std::string path = TempPath("llmc/tiny.bin");
  const std::vector<uint16_t> tokens = {50256, 0, 1, 400, 50255, 7, 9, 11};
  WriteBytes(path, LlmcBytes(tokens));
  auto read = LoadTokens(path, 50257);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, tokens);
  auto parsed = ParseLlmcShard(LlmcBytes(tokens), path, 50257);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, tokens);

  auto ds = TokenDataset::Open(path, 50257, Context(7, 0));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_tokens(Split::kTrain), 8);
  EXPECT_EQ((*ds)->mapped_tokens(), 8);
  std::vector<int32_t> window(8);
  (*ds)->Sample(Split::kTrain, 1, 0, window.data());
  EXPECT_EQ(window, std::vector<int32_t>(tokens.begin(), tokens.end()));
}

TEST(LlmcShard, WriterMatchesTheLayout) {
  const std::string path = TempPath("llmc/written.bin");
  const std::vector<uint16_t> tokens = {3, 1, 4, 1, 5};
  ASSERT_TRUE(WriteLlmcShard(path, tokens).ok());
  EXPECT_EQ(ReadBytes(path), LlmcBytes(tokens));
  ASSERT_TRUE(WriteLlmcShard(path, {}).ok());
  auto empty = LoadTokens(path, 256);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST(LlmcShard, RefusesLlama3ShardsNamingTheMagic) {
  const std::string path = TempPath("llmc/llama3.bin");
  WriteBytes(path, LlmcBytes(20240801, 7, 2, Le32(128000) + Le32(5)));
  auto ds = TokenDataset::Open(path, 50257, Context(4));
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ds.status().message(),
              AllOf(HasSubstr(path), HasSubstr("20240801"), HasSubstr("uint16"),
                    HasSubstr("GPT-2")));
}

TEST(LlmcShard, RefusesCountsThatDisagreeWithTheLength) {
  const std::string path = TempPath("llmc/bad.bin");
  const std::string body = Le16(Filled(10, 1));
  struct Case {
    std::string bytes, field;
  };
  for (const Case& c : {
           Case{LlmcBytes(20240520, 1, 11, body), "count is 11"},  // short
           Case{LlmcBytes(20240520, 1, 9, body), "count is 9"},    // extra
           Case{LlmcBytes(20240520, 1, 10, body + "x"), "count is 10"},
           Case{LlmcBytes(20240520, 1, -1, body), "negative"},
           Case{LlmcBytes(20240520, 2, 10, body), "version 2"},
           Case{LlmcBytes(20240520, 1, 10, body).substr(0, 600), "header"},
       }) {
    WriteBytes(path, c.bytes);
    auto ds = TokenDataset::Open(path, 50257, Context(4));
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss) << c.field;
    EXPECT_THAT(ds.status().message(),
                AllOf(HasSubstr(path), HasSubstr(c.field)));
  }
}

TEST(NanoGptBin, AnOddLengthIsRefused) {
  const std::string path = TempPath("nano/odd/train.bin");
  WriteBytes(path, Le16(Filled(100, 5)) + "x");
  auto ds = TokenDataset::Open(path, 50257, Context(4));
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ds.status().message(), AllOf(HasSubstr(path), HasSubstr("odd")));
}

TEST(TokenFiles, ATokenOutsideTheVocabNamesTheFileAndPosition) {
  const std::string llmc = TempPath("vocab/x_train.bin");
  const std::string nano = TempPath("vocab/nano.bin");
  std::vector<uint16_t> tokens = Filled(20, 3);
  tokens[13] = 50257;
  WriteBytes(llmc, LlmcBytes(tokens));
  WriteBytes(nano, Le16(tokens));
  for (const std::string& path : {llmc, nano}) {
    auto ds = TokenDataset::Open(path, 50257, Context(4));
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ds.status().message(),
                AllOf(HasSubstr(path), HasSubstr("token 50257"),
                      HasSubstr("position 13")));
  }
  EXPECT_TRUE(TokenDataset::Open(llmc, 50258, Context(4, 0)).ok());
}

TEST(NanoGptBin, TrainBinBringsValBinAsTheEvalSplit) {
  const std::string dir = TempPath("nano/data");
  WriteBytes(dir + "/train.bin", Le16(Filled(300, 1)));
  WriteBytes(dir + "/val.bin", Le16(Filled(90, 2)));
  // The file alone and the folder give the same splits, eval_fraction or
  // not.
  for (const std::string& path : {dir + "/train.bin", dir}) {
    auto ds = TokenDataset::Open(path, 50257, Context(8, 0.5));
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ((*ds)->num_tokens(Split::kTrain), 300) << path;
    EXPECT_EQ((*ds)->num_tokens(Split::kEval), 90) << path;
    EXPECT_EQ((*ds)->num_windows(Split::kEval), (90 - 9) / 8 + 1);
    for (const auto& w : Windows(**ds, Split::kTrain))
      EXPECT_EQ(w, std::vector<int32_t>(9, 1));
    for (const auto& w : Windows(**ds, Split::kEval))
      EXPECT_EQ(w, std::vector<int32_t>(9, 2));
  }
  // Named alone, val.bin is train data with the eval_fraction split.
  auto val = TokenDataset::Open(dir + "/val.bin", 50257, Context(8, 0.5));
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ((*val)->num_tokens(Split::kTrain), 45);
}

// Three llm.c train shards of 100, 150 and 200 tokens (all 1, 2 and 3) and
// a validation shard of 80 (all 9) in `dir`.
void WriteFineweb(const std::string& dir) {
  for (int i = 1; i <= 3; ++i) {
    WriteBytes(dir + "/fineweb_train_00000" + std::to_string(i) + ".bin",
               LlmcBytes(Filled(50 + 50 * i, static_cast<uint16_t>(i))));
  }
  WriteBytes(dir + "/fineweb_val_000000.bin", LlmcBytes(Filled(80, 9)));
}

TEST(TokenDataset, AGlobTrainsAcrossItsShardsAndHoldsOutTheValShard) {
  const std::string dir = TempPath("fineweb");
  WriteFineweb(dir);
  const int64_t train_windows =
      (100 - 9) / 8 + 1 + (150 - 9) / 8 + 1 + (200 - 9) / 8 + 1;
  // Val shards among the matches, or beside a pattern or a file of train
  // shards.
  for (const std::string& path :
       {dir + "/fineweb_*.bin", dir + "/fineweb_train_*.bin", dir,
        dir + "/fineweb_train_00000[1-3].bin"}) {
    auto ds = TokenDataset::Open(path, 50257, Context(8));
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ((*ds)->num_tokens(Split::kTrain), 450) << path;
    EXPECT_EQ((*ds)->num_tokens(Split::kEval), 80) << path;
    EXPECT_EQ((*ds)->num_windows(Split::kTrain), train_windows) << path;
    EXPECT_EQ((*ds)->num_windows(Split::kEval), (80 - 9) / 8 + 1) << path;
    EXPECT_EQ((*ds)->mapped_tokens(), 530);
    std::set<int32_t> seen;
    for (const auto& w : Windows(**ds, Split::kTrain)) seen.insert(w[0]);
    EXPECT_EQ(seen, (std::set<int32_t>{1, 2, 3})) << path;
    for (const auto& w : Windows(**ds, Split::kEval)) EXPECT_EQ(w[0], 9);
  }
  // One train shard named alone brings the val shard too.
  auto one =
      TokenDataset::Open(dir + "/fineweb_train_000002.bin", 50257, Context(8));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->num_tokens(Split::kTrain), 150);
  EXPECT_EQ((*one)->num_tokens(Split::kEval), 80);
}

TEST(TokenDataset, WithoutValShardsTheLastTokensAreEval) {
  const std::string dir = TempPath("shards");
  for (int i = 0; i < 3; ++i) {
    WriteBytes(dir + "/part_" + std::to_string(i) + ".bin",
               LlmcBytes(Filled(200, static_cast<uint16_t>(i))));
  }
  auto ds = TokenDataset::Open(dir + "/part_*.bin", 50257, Context(8, 0.1));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_tokens(Split::kTrain), 540);
  EXPECT_EQ((*ds)->num_tokens(Split::kEval), 60);
  for (const auto& w : Windows(**ds, Split::kEval)) EXPECT_EQ(w[0], 2);
}

TEST(TokenDataset, WindowsNeverCrossFromOneShardIntoTheNext) {
  const std::string dir = TempPath("boundaries");
  const std::vector<int> sizes = {37, 8, 50, 9, 23};  // 8: no window of 9
  int64_t expected = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    WriteBytes(dir + "/s" + std::to_string(i) + ".bin",
               Le16(Filled(sizes[i], static_cast<uint16_t>(i))));
    if (sizes[i] >= 9) expected += (sizes[i] - 9) / 3 + 1;
  }
  DatasetOptions o = Context(8, 0);
  o.stride = 3;
  auto ds = TokenDataset::Open(dir, 256, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_tokens(Split::kTrain), 127);
  ASSERT_EQ((*ds)->num_windows(Split::kTrain), expected);
  std::set<int64_t> starts;
  for (int64_t s = 0; s < expected; ++s)
    starts.insert((*ds)->WindowStart(Split::kTrain, 7, s));
  EXPECT_EQ(static_cast<int64_t>(starts.size()), expected);
  for (const auto& w : Windows(**ds, Split::kTrain))
    EXPECT_EQ(w, std::vector<int32_t>(9, w[0]));  // one shard's tokens
}

TEST(TokenDataset, ConsecutiveTextFilesFormOneSegment) {
  const std::string dir = TempPath("texts");
  WriteBytes(dir + "/a.txt", "hello");
  WriteBytes(dir + "/b.txt", "world");
  auto ds = TokenDataset::Open(dir, 256, Context(8, 0));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_windows(Split::kTrain), 1);
  EXPECT_EQ((*ds)->mapped_tokens(), 0);
  std::vector<int32_t> w(9);
  (*ds)->Sample(Split::kTrain, 1, 0, w.data());
  EXPECT_EQ(std::string(w.begin(), w.end()), "helloworl");
}

TEST(TokenDataset, MissingAndOddFilesGetErrorsNamingThem) {
  const std::string dir = TempPath("odd");
  WriteBytes(dir + "/x_val.bin", LlmcBytes(Filled(50, 1)));
  auto none = TokenDataset::Open(dir + "/nothing_*.bin", 256, Context(4));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr(dir + "/nothing_*.bin"));
  // Only validation shards: nothing to train on.
  auto only_val = TokenDataset::Open(dir, 256, Context(4));
  EXPECT_EQ(only_val.status().code(), absl::StatusCode::kInvalidArgument);
  // A match that is gone by the time it is opened.
  fs::create_symlink(dir + "/gone.bin", dir + "/y_train.bin");
  auto gone = TokenDataset::Open(dir + "/y_*.bin", 256, Context(4));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr(dir + "/y_train.bin"));
  // Too short to hold a window of the val shard.
  WriteBytes(dir + "/x_train.bin", LlmcBytes(Filled(50, 1)));
  auto short_val = TokenDataset::Open(dir + "/x_*.bin", 256, Context(60));
  EXPECT_EQ(short_val.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_val.status().message(), HasSubstr("no window of 61"));
  // Unreadable (root reads anything: checked only for other users).
  if (geteuid() != 0) {
    fs::permissions(dir + "/x_train.bin", fs::perms::none);
    auto denied = TokenDataset::Open(dir + "/x_train.bin", 256, Context(4));
    EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(denied.status().message(), HasSubstr(dir + "/x_train.bin"));
  }
}

TEST(ValidationShards, AreNamedAsLlmcAndNanoGptNameThem) {
  for (const char* f :
       {"d/val.bin", "tiny_shakespeare_val.bin", "d/fineweb_val_000000.bin"}) {
    EXPECT_TRUE(IsValidationShard(f)) << f;
  }
  for (const char* f : {"d/train.bin", "interval.bin", "val.txt",
                        "fineweb_train_000001.bin", "val/x.bin"}) {
    EXPECT_FALSE(IsValidationShard(f)) << f;
  }
  EXPECT_EQ(ValidationPatternFor("d/train.bin", true), "d/val.bin");
  EXPECT_EQ(ValidationPatternFor("x_train.bin", true), "x_val.bin");
  EXPECT_EQ(ValidationPatternFor("f/web_train_000001.bin", true),
            "f/web_val_*.bin");
  EXPECT_EQ(ValidationPatternFor("f/web_train_*.bin", false),
            "f/web_val_*.bin");
  EXPECT_EQ(ValidationPatternFor("f/web_train_0[1-3].bin", false),
            "f/web_val_*.bin");
  EXPECT_EQ(ValidationPatternFor("d[1]/train.bin", true), "d\\[1]/val.bin");
  EXPECT_EQ(ValidationPatternFor("d/strain.bin", true), "");
  EXPECT_EQ(ValidationPatternFor("d/train.txt", true), "");
}

// Resident memory of this process in bytes (VmRSS).
int64_t ResidentBytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "VmRSS:"))
      return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

TEST(TokenDataset, OpeningAShardMapsItAndDoesNotReadItWhole) {
  // A sparse 1 GiB llm.c shard of zeros (token 0).
  const testing::ScopedDir dir("sparse");
  fs::create_directories(dir.path);
  const std::string path = dir.path + "/big_train.bin";
  const int64_t bytes = int64_t{1} << 30;
  const int32_t count = static_cast<int32_t>((bytes - 1024) / 2);
  WriteBytes(path, LlmcBytes(20240520, 1, count, ""));
  ASSERT_EQ(truncate(path.c_str(), bytes), 0);

  const int64_t before = ResidentBytes();
  auto ds = TokenDataset::Open(path, 50257, Context(64));
  ASSERT_TRUE(ds.ok()) << ds.status();
  const int64_t grown = ResidentBytes() - before;
  EXPECT_EQ((*ds)->mapped_tokens(), count);
  EXPECT_EQ((*ds)->num_tokens(Split::kTrain) + (*ds)->num_tokens(Split::kEval),
            count);
  EXPECT_LT(grown, bytes / 16) << "opening raised RSS by " << grown;
  std::vector<int32_t> tokens(4 * 64), targets(4 * 64);
  (*ds)->Batch(Split::kTrain, 3, 0, 4, tokens.data(), targets.data());
  EXPECT_EQ(tokens, std::vector<int32_t>(4 * 64, 0));
}

}  // namespace
}  // namespace strata
