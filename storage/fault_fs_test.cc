// The storage layer under injected faults (storage/fault_fs.h): EIO and
// ENOSPC on writes, failed fsyncs, torn writes and failed reads, each ending
// in an error and never in a snapshot or tile with the wrong bytes.
#include "storage/fault_fs.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "storage/data_dir.h"
#include "storage/ram_tier.h"
#include "storage/spill_store.h"
#include "testing/storage/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// `n` records of `floats` weights and two state slots each, derived from
// `seed`.
std::unique_ptr<RamTier> Records(int n, size_t floats, uint64_t seed) {
  auto tier = std::make_unique<RamTier>();
  for (int i = 0; i < n; ++i) {
    ChunkRecord r;
    r.id = 100 + i;
    r.version = seed;
    r.spec = "spec-" + std::to_string(i);
    r.weights.resize(floats);
    for (size_t j = 0; j < floats; ++j) r.weights[j] = 0.25f * (j + seed) - i;
    r.slots = {r.weights, r.weights};
    EXPECT_TRUE(tier->Put(std::move(r)).ok());
  }
  return tier;
}

bool SameRecords(const ChunkTier& a, const ChunkTier& b) {
  if (a.size() != b.size()) return false;
  bool same = true;
  EXPECT_TRUE(a.ForEach([&](const ChunkRecord& x) {
                 absl::StatusOr<ChunkRecord> y = b.Get(x.id);
                 same = same && y.ok() && *y == x;
                 return absl::OkStatus();
               }).ok());
  return same;
}

struct SnapshotFault {
  const char* name;
  FaultOp op;
  int error;
  bool torn;
  const char* suffix;  // the files it hits under the snapshot being written
};

void PrintTo(const SnapshotFault& f, std::ostream* os) { *os << f.name; }

class DataDirFaults : public ::testing::TestWithParam<SnapshotFault> {
 protected:
  void SetUp() override { FaultInjection::Install().Clear(); }
  void TearDown() override { FaultInjection::Install().Clear(); }
};

// A snapshot written while the disk fails: the write reports it, no new
// snapshot is visible (now, or after a restart, which clears the
// leftovers), the older one loads bit for bit, and once the disk is well
// the same snapshot is written whole.
TEST_P(DataDirFaults, AFailedSnapshotLeavesTheOlderOnesWhole) {
  const SnapshotFault& f = GetParam();
  testing::ScopedTempDir tmp;
  const std::unique_ptr<RamTier> old_state = Records(8, 4096, 5);
  const std::unique_ptr<RamTier> new_state = Records(8, 4096, 10);
  {
    auto dir = DataDir::Open(tmp.path(), "shard-0");
    ASSERT_TRUE(dir.ok()) << dir.status();
    ASSERT_TRUE((*dir)->WriteSnapshot(5, *old_state, "five").ok());
    const int64_t before = FaultInjection::Install().injected();
    FaultInjection::Install().Add(FaultRule{tmp.path() + "/tmp/", f.suffix,
                                            f.op, f.error, 0, -1, f.torn});
    const absl::Status s = (*dir)->WriteSnapshot(10, *new_state, "ten");
    EXPECT_FALSE(s.ok());
    EXPECT_GT(FaultInjection::Install().injected(), before);
    EXPECT_NE(s.message().find("injected"), std::string::npos) << s;
    EXPECT_EQ(*(*dir)->ListSnapshots(), std::vector<int64_t>{5});
    RamTier loaded;
    ASSERT_EQ(*(*dir)->LoadSnapshot(5, loaded), "five");
    EXPECT_TRUE(SameRecords(*old_state, loaded));
    FaultInjection::Install().Clear();
  }
  // A restart: what the failed write left under tmp/ goes.
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*(*dir)->ListSnapshots(), std::vector<int64_t>{5});
  std::error_code ec;
  EXPECT_TRUE(!fs::exists(tmp.path() + "/tmp", ec) ||
              fs::is_empty(tmp.path() + "/tmp", ec));
  ASSERT_TRUE((*dir)->WriteSnapshot(10, *new_state, "ten").ok());
  RamTier loaded;
  ASSERT_EQ(*(*dir)->LoadSnapshot(10, loaded), "ten");
  EXPECT_TRUE(SameRecords(*new_state, loaded));
}

INSTANTIATE_TEST_SUITE_P(
    Faults, DataDirFaults,
    ::testing::Values(
        SnapshotFault{"RecordWriteEio", FaultOp::kWrite, EIO, false, ""},
        SnapshotFault{"RecordWriteEnospc", FaultOp::kWrite, ENOSPC, false, ""},
        SnapshotFault{"RecordWriteTorn", FaultOp::kWrite, ENOSPC, true, ""},
        SnapshotFault{"RecordFsync", FaultOp::kSync, EIO, false, ""},
        SnapshotFault{"MetaTorn", FaultOp::kWrite, EIO, true, "/META"},
        SnapshotFault{"MetaFsync", FaultOp::kSync, EIO, false, "/META"}),
    [](const ::testing::TestParamInfo<SnapshotFault>& p) {
      return std::string(p.param.name);
    });

// Reads that fail give an error, never records: a restarting server
// refuses to serve rather than serve part of a snapshot.
TEST(DataDirFaultsRead, AFailedReadIsAnErrorAndTheSnapshotStaysWhole) {
  FaultInjection::Install().Clear();
  testing::ScopedTempDir tmp;
  const std::unique_ptr<RamTier> state = Records(8, 4096, 5);
  auto dir = DataDir::Open(tmp.path(), "shard-0");
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_TRUE((*dir)->WriteSnapshot(5, *state, "five").ok());
  for (const char* suffix : {"/META", ""}) {
    FaultInjection::Install().Add(FaultRule{tmp.path() + "/snapshots/", suffix,
                                            FaultOp::kRead, EIO, 0, -1});
    RamTier loaded;
    absl::StatusOr<std::string> meta = (*dir)->LoadSnapshot(5, loaded);
    EXPECT_FALSE(meta.ok()) << suffix;
    EXPECT_NE(meta.status().message().find("injected"), std::string::npos)
        << meta.status();
    FaultInjection::Install().Clear();
  }
  RamTier loaded;
  ASSERT_EQ(*(*dir)->LoadSnapshot(5, loaded), "five");
  EXPECT_TRUE(SameRecords(*state, loaded));
}

// The spill tier on a disk that fills up or fails: writes are refused with
// an error (the shard then keeps the tile in RAM, server/tile_cache.cc), a
// tile whose write was accepted reads back as written or not at all, and
// once a full disk has room again the tier takes writes again. A flush
// that met EIO stops the database for good (RocksDB's fatal background
// error): its writes stay refused, with the error, until a restart.
class SpillStoreFaults : public ::testing::TestWithParam<int> {};

TEST_P(SpillStoreFaults, AFailingDiskRefusesWritesAndAFullOneRecovers) {
  const int error = GetParam();
  FaultInjection::Install().Clear();
  testing::ScopedTempDir tmp;
  SpillOptions o;
  o.dir = tmp.path();
  o.ram_budget = 1 << 20;
  o.direct_io = false;
  auto store = SpillStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::unique_ptr<RamTier> tiles = Records(48, 1 << 18, 3);  // 3 MiB each
  FaultInjection::Install().Add(
      FaultRule{tmp.path() + "/", "", FaultOp::kWrite, error, 0, -1});
  std::vector<uint64_t> accepted;
  absl::Status refused;
  for (uint64_t id = 100; id < 148 && refused.ok(); ++id) {
    refused = (*store)->Write(*tiles->Get(id));
    if (refused.ok()) accepted.push_back(id);
  }
  ASSERT_FALSE(refused.ok()) << "48 tiles of 3 MiB went to a failing disk";
  EXPECT_EQ(refused.code(), error == ENOSPC
                                ? absl::StatusCode::kResourceExhausted
                                : absl::StatusCode::kUnavailable)
      << refused;
  EXPECT_NE(refused.message().find("injected"), std::string::npos) << refused;
  for (uint64_t id : accepted) {
    absl::StatusOr<ChunkRecord> back = (*store)->Read(id);
    if (back.ok()) {
      EXPECT_EQ(*back, *tiles->Get(id)) << id;
    }
  }
  FaultInjection::Install().Clear();
  if (error != ENOSPC) {
    absl::Status again = (*store)->Write(*tiles->Get(147));
    EXPECT_FALSE(again.ok());
    EXPECT_NE(again.message().find("injected"), std::string::npos) << again;
    return;
  }
  // RocksDB recovers from a full disk on its own thread (it polls for
  // room): writes are refused until then.
  const absl::Time start = absl::Now();
  absl::Status again = (*store)->Write(*tiles->Get(147));
  while (!again.ok() && absl::Now() < start + absl::Seconds(60)) {
    absl::SleepFor(absl::Milliseconds(100));
    again = (*store)->Write(*tiles->Get(147));
  }
  EXPECT_TRUE(again.ok()) << again;
  absl::StatusOr<ChunkRecord> back = (*store)->Read(147);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *tiles->Get(147));
}

INSTANTIATE_TEST_SUITE_P(Errors, SpillStoreFaults,
                         ::testing::Values(ENOSPC, EIO),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(p.param == EIO ? "Eio"
                                                             : "Enospc");
                         });

}  // namespace
}  // namespace strata
