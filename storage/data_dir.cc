#include "storage/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "storage/crc32c.h"
#include "storage/files.h"
#include "storage/rocksdb_tier.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr char kSnapshotPrefix[] = "step-";
constexpr char kIdFile[] = "DIR_ID";
constexpr char kMetaMagic[] = "strata-snapshot-meta";

// META: magic line, then step, record count and metadata size in decimal,
// then the metadata bytes, then the CRC-32C of everything before it.
std::string EncodeMeta(int64_t step, uint64_t records,
                       absl::string_view metadata) {
  std::string out = absl::StrCat(kMetaMagic, "\n", step, " ", records, " ",
                                 metadata.size(), "\n", metadata);
  return absl::StrCat(out, absl::StrFormat("\n%08x", crc32c::Value(out)));
}

struct Meta {
  int64_t step = 0;
  uint64_t records = 0;
  std::string metadata;
};

absl::StatusOr<Meta> DecodeMeta(absl::string_view data, absl::string_view at) {
  const auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("corrupt snapshot metadata ", at, ": ", why));
  };
  uint32_t crc = 0;
  if (data.size() < 9 || data[data.size() - 9] != '\n' ||
      !absl::SimpleHexAtoi(data.substr(data.size() - 8), &crc) ||
      crc != crc32c::Value(data.substr(0, data.size() - 9))) {
    return corrupt("checksum mismatch");
  }
  const std::vector<absl::string_view> head =
      absl::StrSplit(data, absl::MaxSplits('\n', 2));
  if (head.size() != 3 || head[0] != kMetaMagic) return corrupt("bad magic");
  std::vector<absl::string_view> nums = absl::StrSplit(head[1], ' ');
  Meta meta;
  uint64_t size = 0;
  if (nums.size() != 3 || !absl::SimpleAtoi(nums[0], &meta.step) ||
      !absl::SimpleAtoi(nums[1], &meta.records) ||
      !absl::SimpleAtoi(nums[2], &size) || size + 9 != head[2].size()) {
    return corrupt("bad fields");
  }
  meta.metadata = std::string(head[2].substr(0, size));
  return meta;
}

// Reads the snapshot of `step` in directory `dir` (META and db/) into
// `dest`; returns its metadata. DATA_LOSS for a corrupt or incomplete one.
absl::StatusOr<std::string> ReadSnapshotDir(const std::string& dir,
                                            int64_t step, ChunkTier& dest);

// Parses "step-<digits>"; nullopt for anything else.
std::optional<int64_t> StepOfName(const std::string& name) {
  int64_t step = 0;
  if (!absl::StartsWith(name, kSnapshotPrefix) ||
      name.size() == sizeof(kSnapshotPrefix) - 1 ||
      !std::all_of(name.begin() + sizeof(kSnapshotPrefix) - 1, name.end(),
                   [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(name.substr(sizeof(kSnapshotPrefix) - 1), &step)) {
    return std::nullopt;
  }
  return step;
}

}  // namespace

DataDir::DataDir(std::string path, std::unique_ptr<DirClaim> claim)
    : path_(std::move(path)), claim_(std::move(claim)) {}

DataDir::~DataDir() = default;

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(
    const std::string& path, const std::string& owner_tag) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DirClaim> claim,
                          DirClaim::Acquire(path, owner_tag));
  std::unique_ptr<DataDir> dir(new DataDir(path, std::move(claim)));
  // Leftovers of interrupted snapshot writes are never complete: drop them.
  std::error_code ec;
  fs::remove_all(path + "/tmp", ec);
  fs::create_directories(path + "/tmp", ec);
  if (!ec) fs::create_directories(path + "/snapshots", ec);
  if (ec) return FsError("create", path + "/{tmp,snapshots}", ec);
  STRATA_ASSIGN_OR_RETURN(dir->id_, LoadOrMakeId(path));
  return dir;
}

absl::StatusOr<std::string> DataDir::LoadOrMakeId(const std::string& path) {
  const std::string file = path + "/" + kIdFile;
  absl::StatusOr<std::string> id = ReadFile(file, 64);
  if (id.ok()) {
    if (id->size() != 32 ||
        id->find_first_not_of("0123456789abcdef") != std::string::npos) {
      return absl::DataLossError(
          absl::StrCat(file, " does not hold a directory id"));
    }
    return *id;
  }
  if (!absl::IsNotFound(id.status())) return id.status();
  std::random_device random;
  std::string made;
  for (int i = 0; i < 4; ++i) {
    made += absl::StrFormat("%08x", static_cast<uint32_t>(random()));
  }
  const std::string temp = file + ".new";
  STRATA_RETURN_IF_ERROR(WriteFileSynced(temp, made));
  STRATA_RETURN_IF_ERROR(RenameSynced(temp, file));
  return made;
}

std::string DataDir::SnapshotPath(int64_t step) const {
  return absl::StrFormat("%s/snapshots/%s%020d", path_, kSnapshotPrefix, step);
}

std::string DataDir::NewTempPathLocked(absl::string_view name) {
  return absl::StrCat(path_, "/tmp/", name, ".", ++temp_counter_);
}

absl::Status DataDir::WriteSnapshot(int64_t step, const ChunkTier& source,
                                    absl::string_view metadata, int keep,
                                    int64_t protect) {
  if (step < 0 || keep < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot step ", step, " must be >= 0 and keep ", keep, " >= 1"));
  }
  absl::MutexLock lock(&mu_);
  const std::string temp = NewTempPathLocked(absl::StrCat("step-", step));
  if (absl::Status s = WriteSnapshotLocked(step, temp, source, metadata);
      !s.ok()) {
    std::error_code ec;
    fs::remove_all(temp, ec);  // best effort; Open clears tmp/ anyway
    return s;
  }
  return PruneLocked(keep, protect);
}

absl::Status DataDir::WriteSnapshotLocked(int64_t step, const std::string& temp,
                                          const ChunkTier& source,
                                          absl::string_view metadata) {
  // 1. Write the records into a fresh RocksDB under tmp/, then flush it.
  std::error_code ec;
  if (!fs::create_directories(temp, ec)) return FsError("create", temp, ec);
  uint64_t records = 0;
  {
    absl::StatusOr<std::unique_ptr<RocksDbTier>> db = RocksDbTier::Open(
        temp + "/db", /*create=*/true, {.write_ahead_log = false});
    if (!db.ok()) return db.status();
    absl::Status s = source.ForEach([&](const ChunkRecord& r) {
      ++records;
      return (*db)->Put(r);
    });
    if (s.ok()) s = (*db)->Flush();
    if (!s.ok()) return s;
  }
  // 2. The metadata, synced along with the directory entries.
  absl::Status s =
      WriteFileSynced(temp + "/META", EncodeMeta(step, records, metadata));
  if (s.ok()) s = SyncPath(temp + "/db");
  if (s.ok()) s = SyncPath(temp);
  if (!s.ok()) return s;
  // 3. Publish: the rename makes the snapshot visible whole.
  const std::string final_path = SnapshotPath(step);
  if (fs::exists(final_path, ec)) {
    if (absl::Status r = RemoveDirLocked(final_path); !r.ok()) return r;
  }
  return RenameSynced(temp, final_path);
}

absl::Status DataDir::PruneLocked(int keep, int64_t protect) {
  absl::StatusOr<std::vector<int64_t>> steps = ListSnapshots();
  if (!steps.ok()) return steps.status();
  const int excess = static_cast<int>(steps->size()) - keep;
  // Protected snapshots beyond `keep`, at most kMaxProtectedExtra of them:
  // a protected step that stops moving (the scheduler away, a server whose
  // snapshots fail) must not fill the disk.
  constexpr int kMaxProtectedExtra = 16;
  for (int i = 0; i < excess; ++i) {
    // Rising: once one is kept, so are the rest.
    if ((*steps)[i] >= protect && excess - i <= kMaxProtectedExtra) break;
    if (absl::Status s = RemoveDirLocked(SnapshotPath((*steps)[i])); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status DataDir::DropSnapshotsAfter(int64_t step) {
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSnapshots());
  for (int64_t s : steps) {
    if (s <= step) continue;
    STRATA_RETURN_IF_ERROR(RemoveDirLocked(SnapshotPath(s)));
  }
  return absl::OkStatus();
}

absl::Status DataDir::RemoveDirLocked(const std::string& dir) {
  const std::string trash = NewTempPathLocked("trash");
  if (absl::Status s = RenameSynced(dir, trash); !s.ok()) return s;
  std::error_code ec;
  fs::remove_all(trash, ec);
  return ec ? FsError("remove", trash, ec) : absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> DataDir::ListSnapshots() const {
  return ListSnapshotsIn(path_);
}

absl::StatusOr<std::vector<int64_t>> ListSnapshotsIn(const std::string& path) {
  const std::string dir = path + "/snapshots";
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return absl::NotFoundError(absl::StrCat("no directory ", path));
  if (!fs::exists(dir, ec)) return steps;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::optional<int64_t> step = StepOfName(e.path().filename().string());
    if (step.has_value()) steps.push_back(*step);
  }
  if (ec) return FsError("list", dir, ec);
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::optional<int64_t>> DataDir::LatestSnapshot() const {
  absl::StatusOr<std::vector<int64_t>> steps = ListSnapshots();
  if (!steps.ok()) return steps.status();
  if (steps->empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(steps->back());
}

absl::StatusOr<std::string> DataDir::LoadSnapshot(int64_t step,
                                                  ChunkTier& dest) const {
  absl::MutexLock lock(&mu_);
  const std::string dir = SnapshotPath(step);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("no snapshot of step ", step, " in ", path_));
  }
  return ReadSnapshotDir(dir, step, dest);
}

absl::StatusOr<std::string> LoadSnapshotIn(const std::string& path,
                                           int64_t step, ChunkTier& dest,
                                           const std::string& scratch) {
  const std::string dir = absl::StrCat(path, "/snapshots/", kSnapshotPrefix,
                                       absl::StrFormat("%020d", step));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("no snapshot of step ", step, " in ", path));
  }
  // Snapshot files are never written again once renamed into snapshots/:
  // links to them are a consistent copy that a prune cannot remove. (A
  // scratch left by a reader that died is no use to anyone.)
  fs::remove_all(scratch, ec);
  fs::copy(dir, scratch,
           fs::copy_options::recursive | fs::copy_options::create_hard_links,
           ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove_all(scratch, ec);
    if (fs::is_directory(dir, ec)) {  // not pruned: the links failed
      return absl::InternalError(absl::StrCat("cannot link snapshot ", dir,
                                              " into ", scratch, ": ", why));
    }
    return absl::NotFoundError(absl::StrCat("snapshot of step ", step, " in ",
                                            path, " went while being read"));
  }
  absl::StatusOr<std::string> metadata = ReadSnapshotDir(scratch, step, dest);
  fs::remove_all(scratch, ec);
  return metadata;
}

namespace {

absl::StatusOr<std::string> ReadSnapshotDir(const std::string& dir,
                                            int64_t step, ChunkTier& dest) {
  absl::StatusOr<std::string> data = ReadFile(dir + "/META", 1ull << 30);
  if (!data.ok()) {
    return absl::DataLossError(
        absl::StrCat("snapshot ", dir, ": ", data.status().message()));
  }
  absl::StatusOr<Meta> meta = DecodeMeta(*data, dir);
  if (!meta.ok()) return meta.status();
  if (meta->step != step) {
    return absl::DataLossError(
        absl::StrCat("snapshot ", dir, " says step ", meta->step));
  }
  absl::StatusOr<std::unique_ptr<RocksDbTier>> db =
      RocksDbTier::Open(dir + "/db", /*create=*/false, {.read_only = true});
  if (!db.ok()) {
    return absl::DataLossError(
        absl::StrCat("snapshot ", dir, ": ", db.status().message()));
  }
  uint64_t records = 0;
  absl::Status s = (*db)->ForEach([&](const ChunkRecord& r) {
    ++records;
    return dest.Put(r);
  });
  if (!s.ok()) return s;
  if (records != meta->records) {
    return absl::DataLossError(absl::StrCat("snapshot ", dir, " holds ",
                                            records, " records, wrote ",
                                            meta->records));
  }
  return std::move(meta->metadata);
}

}  // namespace

std::string ShardOwnerTag(int shard) { return absl::StrCat("shard-", shard); }

}  // namespace strata
