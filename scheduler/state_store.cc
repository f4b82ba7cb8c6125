#include "scheduler/state_store.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/status.h"
#include "rocksdb/options.h"
#include "storage/fault_fs.h"
#include "storage/rocksdb_resume.h"
#include "storage/rocksdb_status.h"

namespace strata::scheduler_internal {
namespace {

namespace fs = std::filesystem;

constexpr char kMetaPrefix[] = "meta/";
constexpr char kMemberPrefix[] = "member/";
constexpr char kKvPrefix[] = "kv/";
constexpr char kLedgerStateKey[] = "ledger/state";
constexpr char kLedgerAppliedPrefix[] = "ledger/applied/";
constexpr char kLedgerSplitPrefix[] = "ledger/split/";

std::string MemberKey(uint64_t id) {
  return absl::StrFormat("%s%020d", kMemberPrefix, id);
}

std::string LedgerRecordKey(uint64_t seq) {
  return absl::StrFormat("%s%020d", kLedgerAppliedPrefix, seq);
}

std::string LedgerSplitKey(int64_t step, uint64_t epoch) {
  return absl::StrFormat("%s%020d/%020d", kLedgerSplitPrefix, step, epoch);
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  return FromRocksDb(s, absl::StrCat("scheduler state: ", what));
}

// Makes sure `dir` is ours (has the marker) or is new/empty, and marks it.
absl::Status LoadRecord(absl::string_view key, absl::string_view value,
                        PersistedState& state) {
  if (absl::ConsumePrefix(&key, kMetaPrefix)) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(value, &v)) {
      return absl::DataLossError(absl::StrCat("bad meta value for ", key));
    }
    if (key == "epoch") state.epoch = v;
    if (key == "workers_epoch") state.workers_epoch = v;
    if (key == "next_member_id") state.next_member_id = v;
    if (key == "shard_map_version") state.shard_map_version = v;
    if (key == "generation") state.generation = v;
    if (key == "rollback_step") state.rollback_step = v;
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&key, kMemberPrefix)) {
    v1::Member m;
    if (!m.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(absl::StrCat("bad member record ", key));
    }
    state.members.push_back(std::move(m));
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&key, kKvPrefix)) {
    v1::KvGetResponse e;
    if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(absl::StrCat("bad kv record ", key));
    }
    state.kv[std::string(key)] = std::move(e);
    return absl::OkStatus();
  }
  if (key == kLedgerStateKey) {
    if (!state.ledger.ParseFromArray(value.data(),
                                     static_cast<int>(value.size()))) {
      return absl::DataLossError("bad ledger state record");
    }
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&key, kLedgerSplitPrefix)) {
    v1::LedgerState::Split split;
    if (!split.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(absl::StrCat("bad ledger split ", key));
    }
    state.ledger_splits.push_back(std::move(split));  // keys sort by step
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&key, kLedgerAppliedPrefix)) {
    uint64_t seq = 0;
    v1::LedgerRecord r;
    if (!absl::SimpleAtoi(key, &seq) ||
        !r.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(absl::StrCat("bad ledger record ", key));
    }
    state.ledger_applied.emplace_back(seq, std::move(r));  // keys sort by seq
    return absl::OkStatus();
  }
  return absl::OkStatus();  // unknown records: from a newer version; ignore
}

}  // namespace

void StateBatch::PutMeta(const std::string& name, uint64_t value) {
  batch_.Put(absl::StrCat(kMetaPrefix, name), absl::StrCat(value));
}

void StateBatch::PutMember(const v1::Member& member) {
  batch_.Put(MemberKey(member.id()), member.SerializeAsString());
}

void StateBatch::DeleteMember(uint64_t id) { batch_.Delete(MemberKey(id)); }

void StateBatch::PutKv(const std::string& key, const v1::KvGetResponse& entry) {
  batch_.Put(absl::StrCat(kKvPrefix, key), entry.SerializeAsString());
}

void StateBatch::DeleteKv(const std::string& key) {
  batch_.Delete(absl::StrCat(kKvPrefix, key));
}

void StateBatch::PutLedgerState(const v1::LedgerState& state) {
  batch_.Put(kLedgerStateKey, state.SerializeAsString());
}

void StateBatch::PutLedgerRecord(uint64_t seq, const v1::LedgerRecord& record) {
  batch_.Put(LedgerRecordKey(seq), record.SerializeAsString());
}

void StateBatch::PutLedgerSplit(const v1::LedgerState::Split& split) {
  batch_.Put(LedgerSplitKey(split.step(), split.epoch()),
             split.SerializeAsString());
}

void StateBatch::DeleteLedgerSplit(int64_t step, uint64_t epoch) {
  batch_.Delete(LedgerSplitKey(step, epoch));
}

void StateBatch::DeleteLedgerRecord(uint64_t seq) {
  batch_.Delete(LedgerRecordKey(seq));
}

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(
    const std::string& data_dir) {
  if (data_dir.empty()) {
    return std::unique_ptr<StateStore>(new StateStore(nullptr));
  }
  const fs::path dir(data_dir);
  // Older schedulers marked their directory with kLegacyMarkerFile alone.
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<DirClaim> claim,
      DirClaim::Acquire(data_dir, kSchedulerOwnerTag, kLegacyMarkerFile));
  rocksdb::Options options;
  if (rocksdb::Env* env = FaultEnvOrNull()) options.env = env;  // tests only
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(options, (dir / "state").string(), &raw);
  if (!s.ok()) return FromRocks(s, "open");
  return std::unique_ptr<StateStore>(
      new StateStore(std::unique_ptr<rocksdb::DB>(raw), std::move(claim)));
}

absl::StatusOr<PersistedState> StateStore::Load() const {
  PersistedState state;
  if (db_ == nullptr) return state;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    state.fresh = false;
    absl::Status s = LoadRecord(
        absl::string_view(it->key().data(), it->key().size()),
        absl::string_view(it->value().data(), it->value().size()), state);
    if (!s.ok()) return s;
  }
  if (absl::Status s = FromRocks(it->status(), "load"); !s.ok()) return s;
  return state;
}

absl::Status StateStore::Write(StateBatch& batch) {
  if (db_ == nullptr) return absl::OkStatus();
  // A stopped database (a disk that was full) takes writes again once the
  // disk does (storage/rocksdb_resume.h).
  return FromRocks(
      WriteResuming(
          *db_,
          [&] { return db_->Write(rocksdb::WriteOptions(), &batch.batch_); }),
      "write");
}

}  // namespace strata::scheduler_internal
