// Chunks whose initial weights come from a safetensors file (InitSpec
// FILE): what `--init_from` registers.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "common/chunk_plan.h"
#include "formats/safetensors.h"
#include "server/init.h"
#include "server/shard.h"
#include "testing/server/shard_util.h"
#include "testing/temp_dir.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

// A file holding `src`, a (kN/2, 2) matrix: transposed it is the (2, kN/2)
// tensor "w" of FromFile.
std::string WriteSource(const std::vector<float>& src) {
  const std::string path = testing::FreshDir("init-file") + "/w.safetensors";
  EXPECT_TRUE(
      WriteSafetensors(path, {}, {{"src.weight", {kN / 2, 2}, src.data()}})
          .ok());
  return path;
}

// OneChunk("w"), a (2, kN/2) tensor initialized from `file`'s transpose.
v1::RegisterChunksRequest FromFile(const std::string& file) {
  v1::RegisterChunksRequest req = OneChunk();
  v1::ChunkSpec* c = req.mutable_chunks(0);
  c->clear_tensor_shape();
  c->add_tensor_shape(2);
  c->add_tensor_shape(kN / 2);
  v1::InitSpec* init = c->mutable_init();
  init->set_kind(v1::InitSpec::FILE);
  init->set_file(file);
  init->set_source("src.weight");
  init->set_transpose(true);
  init->set_file_bytes(std::filesystem::file_size(file));
  return req;
}

TEST(ShardInitFile, ChunksStartFromTheFilesTensor) {
  std::vector<float> src(kN);
  for (int i = 0; i < kN; ++i) src[i] = 0.5f * i;  // src[r][c] = r*2 + c
  const std::string file = WriteSource(src);
  Shard shard(Opts("bsp"));
  auto reg = shard.Register(FromFile(file));
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->created(), 1u);
  std::vector<float> want(kN);  // w[r][c] = src[c][r]
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < kN / 2; ++c) want[r * (kN / 2) + c] = src[c * 2 + r];
  EXPECT_EQ(PullNow(shard, 1, 0), want);
}

// A tensor cut into chunks (as ChunkPlan cuts it): each reads its own
// elements of the transposed source, at its offset.
TEST(ShardInitFile, EachChunkReadsItsPartOfATransposedTensor) {
  constexpr int kRows = 4, kCols = 6, kPer = 8;  // w is (4, 6): 3 chunks
  std::vector<float> src(kRows * kCols);         // (6, 4)
  for (size_t i = 0; i < src.size(); ++i) src[i] = 1.0f + i;
  const std::string path = testing::FreshDir("init-chunks") + "/w.safetensors";
  ASSERT_TRUE(
      WriteSafetensors(path, {}, {{"src", {kCols, kRows}, src.data()}}).ok());
  v1::RegisterChunksRequest req = OneChunk();
  req.clear_chunks();
  for (int k = 0; k < 3; ++k) {
    v1::ChunkSpec* c = req.add_chunks();
    c->set_chunk_id(ChunkId("w", k));
    c->set_tensor("w");
    c->set_index(k);
    c->set_offset(k * kPer);
    c->set_numel(kPer);
    c->set_group("g");
    c->add_tensor_shape(kRows);
    c->add_tensor_shape(kCols);
    v1::InitSpec* init = c->mutable_init();
    init->set_kind(v1::InitSpec::FILE);
    init->set_file(path);
    init->set_source("src");
    init->set_transpose(true);
  }
  Shard shard(Opts("bsp"));
  auto reg = shard.Register(req);
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_EQ(reg->created(), 3u);
  for (int k = 0; k < 3; ++k) {
    v1::PullRequest pull;
    pull.set_member_id(1);
    pull.set_chunk_id(ChunkId("w", k));
    std::string out;
    ASSERT_TRUE(shard.Pull(pull, &out).ok());
    ASSERT_EQ(out.size(), kPer * 4u);
    for (int e = 0; e < kPer; ++e) {
      const int i = k * kPer + e, r = i / kCols, c = i % kCols;
      float got;
      std::memcpy(&got, out.data() + 4 * e, 4);
      EXPECT_EQ(got, src[c * kRows + r]) << "chunk " << k << " element " << e;
    }
  }
}

// Workers of one job must agree on how chunks start: another init is
// refused, naming the flags; the same file by another path is not.
TEST(ShardInitFile, AnotherInitForAnExistingChunkIsRefused) {
  const std::string file = WriteSource(std::vector<float>(kN, 1.0f));
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(FromFile(file)).ok());
  v1::RegisterChunksRequest drawn = FromFile(file);
  drawn.mutable_chunks(0)->mutable_init()->Clear();
  absl::Status s = shard.Register(drawn).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--init_from"), std::string::npos) << s;
  const std::string link = file + ".link";
  std::filesystem::create_symlink(file, link);
  v1::RegisterChunksRequest other_path = FromFile(file);
  other_path.mutable_chunks(0)->mutable_init()->set_file(link);
  auto again = shard.Register(other_path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->existing(), 1u);
}

TEST(ShardInitFile, RefusesASourceThatDoesNotFitAndCreatesNothing) {
  const std::string file = WriteSource(std::vector<float>(kN, 1.0f));
  struct Case {
    const char* what;
    void (*edit)(v1::InitSpec&);
    absl::StatusCode code;
  };
  const Case cases[] = {
      {"missing file", [](v1::InitSpec& i) { i.set_file("/nonexistent/x"); },
       absl::StatusCode::kFailedPrecondition},
      {"other size", [](v1::InitSpec& i) { i.set_file_bytes(7); },
       absl::StatusCode::kFailedPrecondition},
      {"missing tensor", [](v1::InitSpec& i) { i.set_source("nope"); },
       absl::StatusCode::kInvalidArgument},
      {"not transposed", [](v1::InitSpec& i) { i.set_transpose(false); },
       absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    Shard shard(Opts("bsp"));
    v1::RegisterChunksRequest req = FromFile(file);
    c.edit(*req.mutable_chunks(0)->mutable_init());
    absl::Status s = shard.Register(req).status();
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s;
    EXPECT_EQ(shard.num_chunks(), 0u) << c.what;
  }
}

TEST(ShardInitFile, AFileThatIsNotSafetensorsIsDataLoss) {
  const std::string file = WriteSource(std::vector<float>(kN, 1.0f));
  std::filesystem::resize_file(file, 20);
  v1::RegisterChunksRequest req = FromFile(file);
  req.mutable_chunks(0)->mutable_init()->set_file_bytes(0);
  Shard shard(Opts("bsp"));
  absl::Status s = shard.Register(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(file), std::string::npos) << s;
}

}  // namespace
}  // namespace strata
