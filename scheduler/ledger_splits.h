// The data ledger's BSP splits (ledger.proto LedgerState.Split): step t's
// samples split among a workers epoch's live workers, by (step, epoch).
// Each is stored under a key of its own (scheduler/state_store.h) so that a
// commit writes only the splits it changes: a worker leases hundreds of
// steps ahead (cluster/lease_ahead.h), while the rest of the ledger's state
// is written whole at every commit. A change is staged in an Edit, which
// reads through to the table, and adopted once the write batch that stores
// it is written (Ledger::Commit). Private to scheduler/; not thread-safe
// (the ledger's lock guards it).
#ifndef STRATA_SCHEDULER_LEDGER_SPLITS_H_
#define STRATA_SCHEDULER_LEDGER_SPLITS_H_

#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "scheduler/state_store.h"
#include "strata/v1/ledger.pb.h"

namespace strata::scheduler_internal {

class SplitTable {
 public:
  using Split = v1::LedgerState::Split;
  using Key = std::pair<int64_t, uint64_t>;  // step, workers epoch

  // Changes to a table, staged.
  class Edit {
   public:
    explicit Edit(const SplitTable& table) : table_(table) {}
    // The split of (step, epoch) as the edit leaves it, or nullptr.
    const Split* Find(int64_t step, uint64_t epoch) const;
    // A new split of (step, epoch). REQUIRES: Find gives none.
    Split* Add(int64_t step, uint64_t epoch);
    // Drops the splits of steps before `step` (those applied).
    void DropBefore(int64_t step);
    // Drops every split (a rollback).
    void DropAll();
    // Adds the edit's writes to `batch`.
    void Write(StateBatch& batch) const;

   private:
    friend class SplitTable;
    bool Dropped(const Key& k) const {
      return drop_all_ || k.first < drop_before_;
    }
    const SplitTable& table_;
    std::map<Key, Split> added_;
    int64_t drop_before_ = std::numeric_limits<int64_t>::min();
    bool drop_all_ = false;
  };

  // `stored`: the splits stored under their own keys; `inline_splits`: those
  // an older version kept inside the state record (written under their own
  // keys with the first edit's batch).
  SplitTable(std::vector<Split> stored, std::vector<Split> inline_splits);

  // Takes a written edit's changes.
  void Adopt(const Edit& edit);
  size_t size() const { return splits_.size(); }
  // One past the highest step split (0 for none).
  int64_t EndStep() const {
    return splits_.empty() ? 0 : splits_.rbegin()->first.first + 1;
  }

 private:
  std::map<Key, Split> splits_;
  bool unsaved_ = false;  // splits_ holds inline splits not yet under keys
};

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_LEDGER_SPLITS_H_
