// Durable state of the scheduler: members, epochs, the member
// id counter, the shard map version and the rendezvous KV, kept in RocksDB so
// a restarted scheduler carries on. Private to scheduler/.
//
// Layout in data_dir: the claim (storage/dir_claim.h: marker and lock, owner
// "scheduler") and the RocksDB database in "state/". Keys:
//   meta/<name>   -> decimal uint64 (epoch, workers_epoch, next_member_id,
//                    shard_map_version, generation, rollback_step)
//   member/<id>   -> serialized v1::Member (id as 20 zero-padded digits)
//   kv/<key>      -> serialized v1::KvGetResponse (value and revision)
//   ledger/state  -> serialized v1::LedgerState (scheduler/ledger.h), its
//                    BSP splits apart (older versions kept them inside)
//   ledger/split/<step>/<epoch> -> serialized v1::LedgerState::Split (20
//                    digits each; scheduler/ledger_splits.h)
//   ledger/applied/<seq> -> serialized v1::LedgerRecord (seq: 20 digits)
// Leases are not stored: a restarted scheduler grants every member a full
// lease, since absolute times from before the restart mean nothing.
#ifndef STRATA_SCHEDULER_STATE_STORE_H_
#define STRATA_SCHEDULER_STATE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/dir_claim.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/ledger.pb.h"
#include "strata/v1/scheduler.pb.h"

namespace strata::scheduler_internal {

// The owner tag in a scheduler directory's marker.
inline constexpr char kSchedulerOwnerTag[] = "scheduler";
// What marked a scheduler directory before the shared claim; such a
// directory is adopted on open.
inline constexpr char kLegacyMarkerFile[] = "STRATA_SCHEDULER";

// Everything a scheduler restores at start.
struct PersistedState {
  bool fresh = true;  // nothing was stored before
  uint64_t epoch = 0;
  uint64_t workers_epoch = 0;
  uint64_t next_member_id = 1;
  uint64_t shard_map_version = 0;
  uint64_t generation = 0;                      // View.generation
  uint64_t rollback_step = 0;                   // View.rollback_step
  std::vector<v1::Member> members;              // by rising id
  std::map<std::string, v1::KvGetResponse> kv;  // value and revision
  v1::LedgerState ledger;
  // The ledger's BSP splits stored under keys of their own, by rising
  // (step, workers epoch).
  std::vector<v1::LedgerState::Split> ledger_splits;
  // Applied ledger records by rising sequence number.
  std::vector<std::pair<uint64_t, v1::LedgerRecord>> ledger_applied;
};

// A set of writes applied atomically by StateStore::Write.
class StateBatch {
 public:
  void PutMeta(const std::string& name, uint64_t value);
  void PutMember(const v1::Member& member);
  void DeleteMember(uint64_t id);
  void PutKv(const std::string& key, const v1::KvGetResponse& entry);
  void DeleteKv(const std::string& key);
  void PutLedgerState(const v1::LedgerState& state);
  void PutLedgerRecord(uint64_t seq, const v1::LedgerRecord& record);
  void PutLedgerSplit(const v1::LedgerState::Split& split);
  void DeleteLedgerSplit(int64_t step, uint64_t epoch);
  void DeleteLedgerRecord(uint64_t seq);

 private:
  friend class StateStore;
  rocksdb::WriteBatch batch_;
};

// RocksDB-backed store, or a no-op one when data_dir is empty (the scheduler
// then keeps its state in memory only). Thread-safe (RocksDB is).
class StateStore {
 public:
  // Opens (creating if needed) the state in `data_dir`; "" gives an in-memory
  // store. Errors: FAILED_PRECONDITION if data_dir is a non-empty directory
  // without our marker, or not a directory; INTERNAL/IO errors from RocksDB.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(
      const std::string& data_dir);

  // Reads everything stored. Errors: DATA_LOSS on a record that does not
  // parse.
  absl::StatusOr<PersistedState> Load() const;

  // Applies `batch` atomically (a no-op in memory). Errors from RocksDB.
  absl::Status Write(StateBatch& batch);

 private:
  StateStore(std::unique_ptr<rocksdb::DB> db,
             std::unique_ptr<DirClaim> claim = nullptr)
      : claim_(std::move(claim)), db_(std::move(db)) {}

  std::unique_ptr<DirClaim> claim_;  // held while open; null in memory
  std::unique_ptr<rocksdb::DB> db_;  // null: in memory only
};

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_STATE_STORE_H_
