#include "storage/data_dir.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "storage/ram_tier.h"
#include "testing/storage/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// A tier of `n` chunks with Adam-like state and awkward float values.
std::unique_ptr<RamTier> MakeSource(int n, uint64_t version) {
  auto tier = std::make_unique<RamTier>();
  for (int i = 0; i < n; ++i) {
    ChunkRecord r;
    r.id = 1000 + i;
    r.version = version;
    r.spec = std::string("spec\0", 5) + std::to_string(i);
    for (int j = 0; j < 3000; ++j) r.weights.push_back(0.1f * j - i);
    r.weights[0] = -0.0f;
    r.weights[1] = std::numeric_limits<float>::denorm_min();
    r.slots = {r.weights, r.weights};
    r.slots[1][2] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(tier->Put(std::move(r)).ok());
  }
  return tier;
}

void ExpectBitIdentical(const ChunkTier& a, const ChunkTier& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_TRUE(a.ForEach([&](const ChunkRecord& x) {
                 absl::StatusOr<ChunkRecord> y = b.Get(x.id);
                 EXPECT_TRUE(y.ok()) << y.status();
                 if (!y.ok()) return y.status();
                 EXPECT_EQ(x.version, y->version);
                 EXPECT_EQ(x.spec, y->spec);
                 EXPECT_EQ(x.weights.size(), y->weights.size());
                 EXPECT_EQ(std::memcmp(x.weights.data(), y->weights.data(),
                                       x.weights.size() * 4),
                           0);
                 EXPECT_EQ(x.slots.size(), y->slots.size());
                 for (size_t s = 0; s < x.slots.size(); ++s) {
                   EXPECT_EQ(std::memcmp(x.slots[s].data(), y->slots[s].data(),
                                         x.slots[s].size() * 4),
                             0);
                 }
                 return absl::OkStatus();
               }).ok());
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Flips one byte in the middle of the file at `path`.
void CorruptFile(const fs::path& path) {
  const uintmax_t size = fs::file_size(path);
  ASSERT_GT(size, 0u);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(size / 2));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(size / 2));
  f.write(&c, 1);
}

// Flips one byte in the middle of the largest file under `dir`.
void CorruptLargestFile(const std::string& dir) {
  fs::path largest;
  uintmax_t size = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.file_size() > size) {
      size = e.file_size();
      largest = e.path();
    }
  }
  ASSERT_GT(size, 0u);
  CorruptFile(largest);
}

TEST(DataDir, SnapshotRoundTripIsBitIdentical) {
  testing::ScopedTempDir tmp;
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*(*dir)->LatestSnapshot(), std::nullopt);
  const std::unique_ptr<RamTier> source = MakeSource(20, 7);
  const std::string meta("groups\0\n\xff", 9);
  ASSERT_TRUE((*dir)->WriteSnapshot(7, *source, meta).ok());
  EXPECT_EQ(*(*dir)->LatestSnapshot(), 7);
  RamTier loaded;
  absl::StatusOr<std::string> got = (*dir)->LoadSnapshot(7, loaded);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, meta);
  ExpectBitIdentical(*source, loaded);
}

TEST(DataDir, EmptySourceMakesAnEmptySnapshot) {
  testing::ScopedTempDir tmp;
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_TRUE((*dir)->WriteSnapshot(0, RamTier(), "").ok());
  RamTier loaded;
  EXPECT_EQ(*(*dir)->LoadSnapshot(0, loaded), "");
  EXPECT_EQ(loaded.size(), 0u);
}

// The newest step every server holds (protect) is kept with every newer
// one, however many: a rollback may go there.
TEST(DataDir, KeepsTheProtectedStepAndNewerBeyondKeep) {
  testing::ScopedTempDir tmp;
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok()) << dir.status();
  for (int64_t step : {5, 10, 15, 20, 25, 30}) {
    ASSERT_TRUE(
        (*dir)->WriteSnapshot(step, *MakeSource(1, step), "m", 2, 15).ok());
  }
  EXPECT_EQ(*(*dir)->ListSnapshots(), (std::vector<int64_t>{15, 20, 25, 30}));
  // Once the protected step moves on, the older ones go.
  ASSERT_TRUE((*dir)->WriteSnapshot(35, *MakeSource(1, 35), "m", 2, 30).ok());
  EXPECT_EQ(*(*dir)->ListSnapshots(), (std::vector<int64_t>{30, 35}));
  // A protected step that stops moving keeps 16 beyond `keep`, no more.
  for (int64_t step = 40; step < 200; step += 5) {
    ASSERT_TRUE(
        (*dir)->WriteSnapshot(step, *MakeSource(1, step), "m", 2, 30).ok());
  }
  const std::vector<int64_t> held = *(*dir)->ListSnapshots();
  EXPECT_EQ(held.size(), 18u);
  EXPECT_EQ(held.back(), 195);
}

TEST(DataDir, KeepsOnlyTheNewestSnapshotsAndSurvivesReopen) {
  testing::ScopedTempDir tmp;
  {
    auto dir = DataDir::Open(tmp.path(), "shard-1");
    ASSERT_TRUE(dir.ok()) << dir.status();
    for (int64_t step : {5, 10, 15, 20, 25}) {
      ASSERT_TRUE(
          (*dir)->WriteSnapshot(step, *MakeSource(2, step), "m", 2).ok());
    }
    EXPECT_EQ(*(*dir)->ListSnapshots(), (std::vector<int64_t>{20, 25}));
    // Rewriting a step replaces it.
    ASSERT_TRUE((*dir)->WriteSnapshot(25, *MakeSource(3, 26), "n", 2).ok());
  }
  auto dir = DataDir::Open(tmp.path(), "shard-1");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*(*dir)->LatestSnapshot(), 25);
  RamTier loaded;
  EXPECT_EQ(*(*dir)->LoadSnapshot(25, loaded), "n");
  EXPECT_EQ(loaded.size(), 3u);
  EXPECT_EQ((*dir)->LoadSnapshot(5, loaded).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(DataDir, DropsSnapshotsAfterAStep) {
  testing::ScopedTempDir tmp;
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok()) << dir.status();
  for (int64_t step : {10, 20, 30}) {
    ASSERT_TRUE((*dir)->WriteSnapshot(step, *MakeSource(1, step), "m", 5).ok());
  }
  ASSERT_TRUE((*dir)->DropSnapshotsAfter(10).ok());
  EXPECT_EQ(*(*dir)->ListSnapshots(), (std::vector<int64_t>{10}));
  ASSERT_TRUE((*dir)->DropSnapshotsAfter(10).ok());  // nothing left to drop
  EXPECT_EQ(*(*dir)->ListSnapshots(), (std::vector<int64_t>{10}));
}

TEST(DataDir, DirectoryWithForeignFilesIsRefused) {
  testing::ScopedTempDir tmp;
  fs::create_directories(tmp.path());
  WriteText(tmp.path() + "/important.txt", "not ours");
  absl::StatusOr<std::unique_ptr<DataDir>> dir =
      DataDir::Open(tmp.path(), "shard-0");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(dir.status().message(), "not a Strata data directory"))
      << dir.status();
  EXPECT_TRUE(fs::exists(tmp.path() + "/important.txt"));
}

TEST(DataDir, AFileIsNotADirectory) {
  testing::ScopedTempDir tmp;
  fs::create_directories(tmp.path());
  WriteText(tmp.path() + "/file", "x");
  EXPECT_EQ(DataDir::Open(tmp.path() + "/file", "a").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DataDir, AnotherOwnersDirectoryIsRefused) {
  testing::ScopedTempDir tmp;
  ASSERT_TRUE(DataDir::Open(tmp.path(), "shard-0").ok());
  absl::StatusOr<std::unique_ptr<DataDir>> dir =
      DataDir::Open(tmp.path(), "shard-1");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(dir.status().message(), "shard-0"));
}

TEST(DataDir, ASecondOpenerIsRefusedWhileTheFirstHoldsIt) {
  testing::ScopedTempDir tmp;
  auto first = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(DataDir::Open(tmp.path(), "shard-0").status().code(),
            absl::StatusCode::kFailedPrecondition);
  first->reset();
  EXPECT_TRUE(DataDir::Open(tmp.path(), "shard-0").ok());
}

TEST(DataDir, BadOwnerTagIsInvalid) {
  testing::ScopedTempDir tmp;
  EXPECT_EQ(DataDir::Open(tmp.path(), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataDir::Open(tmp.path(), "a\nb").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DataDir, CorruptMarkerIsDataLoss) {
  testing::ScopedTempDir tmp;
  ASSERT_TRUE(DataDir::Open(tmp.path(), "shard-0").ok());
  const std::string marker = tmp.path() + "/STRATA_DATADIR";
  std::string text;
  std::getline(std::ifstream(marker), text, '\0');
  text[text.find("shard-0")] = 'S';  // checksum no longer matches
  WriteText(marker, text);
  absl::StatusOr<std::unique_ptr<DataDir>> dir =
      DataDir::Open(tmp.path(), "shard-0");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kDataLoss) << dir.status();
  WriteText(marker, "garbage");
  EXPECT_EQ(DataDir::Open(tmp.path(), "shard-0").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(DataDir, CorruptSnapshotDataIsDataLoss) {
  testing::ScopedTempDir tmp;
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE((*dir)->WriteSnapshot(3, *MakeSource(10, 3), "m").ok());
  CorruptLargestFile((*dir)->SnapshotPath(3) + "/db");
  RamTier loaded;
  const absl::Status s = (*dir)->LoadSnapshot(3, loaded).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

TEST(DataDir, CorruptOrMissingSnapshotMetaIsDataLoss) {
  testing::ScopedTempDir tmp;
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE((*dir)->WriteSnapshot(3, *MakeSource(1, 3), "metadata").ok());
  const std::string meta = (*dir)->SnapshotPath(3) + "/META";
  CorruptFile(meta);
  RamTier loaded;
  EXPECT_EQ((*dir)->LoadSnapshot(3, loaded).status().code(),
            absl::StatusCode::kDataLoss);
  fs::remove(meta);
  EXPECT_EQ((*dir)->LoadSnapshot(3, loaded).status().code(),
            absl::StatusCode::kDataLoss);
}

// A tier whose ForEach fails after yielding one record.
class FailingTier : public RamTier {
 public:
  absl::Status ForEach(const std::function<absl::Status(const ChunkRecord&)>&
                           fn) const override {
    ChunkRecord r;
    r.id = 1;
    if (absl::Status s = fn(r); !s.ok()) return s;
    return absl::UnavailableError("source went away");
  }
};

TEST(DataDir, FailedSnapshotLeavesNothingBehind) {
  testing::ScopedTempDir tmp;
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE((*dir)->WriteSnapshot(1, *MakeSource(1, 1), "m").ok());
  EXPECT_EQ((*dir)->WriteSnapshot(2, FailingTier(), "m").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(*(*dir)->LatestSnapshot(), 1);
  EXPECT_TRUE(fs::is_empty(tmp.path() + "/tmp"));
}

TEST(DataDir, HalfWrittenSnapshotIsIgnoredAndCleanedUp) {
  testing::ScopedTempDir tmp;
  {
    auto dir = DataDir::Open(tmp.path(), "shard-0");
    ASSERT_TRUE(dir.ok());
    ASSERT_TRUE((*dir)->WriteSnapshot(1, *MakeSource(2, 1), "m").ok());
  }
  // A crash while writing step 2 leaves its files under tmp/.
  const std::string leftover = tmp.path() + "/tmp/step-2.1";
  fs::create_directories(leftover + "/db");
  WriteText(leftover + "/db/000001.sst", "partial");
  // And a stray directory in snapshots/ that is not a snapshot name.
  fs::create_directories(tmp.path() + "/snapshots/step-3.partial");
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*(*dir)->LatestSnapshot(), 1);
  EXPECT_FALSE(fs::exists(leftover));
}

}  // namespace
}  // namespace strata
