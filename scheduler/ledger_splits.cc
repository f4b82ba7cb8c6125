#include "scheduler/ledger_splits.h"

#include <algorithm>

#include "common/check.h"

namespace strata::scheduler_internal {

SplitTable::SplitTable(std::vector<Split> stored,
                       std::vector<Split> inline_splits) {
  for (Split& s : stored) splits_[{s.step(), s.epoch()}] = std::move(s);
  for (Split& s : inline_splits) {
    splits_.emplace(Key{s.step(), s.epoch()}, std::move(s));
    unsaved_ = true;
  }
}

const SplitTable::Split* SplitTable::Edit::Find(int64_t step,
                                                uint64_t epoch) const {
  const Key k{step, epoch};
  if (auto it = added_.find(k); it != added_.end()) return &it->second;
  if (Dropped(k)) return nullptr;
  auto it = table_.splits_.find(k);
  return it == table_.splits_.end() ? nullptr : &it->second;
}

SplitTable::Split* SplitTable::Edit::Add(int64_t step, uint64_t epoch) {
  STRATA_CHECK(Find(step, epoch) == nullptr);
  Split& s = added_[{step, epoch}];
  s.set_step(step);
  s.set_epoch(epoch);
  return &s;
}

void SplitTable::Edit::DropBefore(int64_t step) {
  drop_before_ = std::max(drop_before_, step);
  added_.erase(added_.begin(), added_.lower_bound({step, 0}));
}

void SplitTable::Edit::DropAll() {
  drop_all_ = true;
  added_.clear();
}

void SplitTable::Edit::Write(StateBatch& batch) const {
  for (const auto& [k, s] : table_.splits_) {
    if (Dropped(k)) {
      batch.DeleteLedgerSplit(k.first, k.second);
    } else if (table_.unsaved_ && !added_.contains(k)) {
      batch.PutLedgerSplit(s);
    }
  }
  for (const auto& [k, s] : added_) batch.PutLedgerSplit(s);
}

void SplitTable::Adopt(const Edit& edit) {
  if (edit.drop_all_) {
    splits_.clear();
  } else {
    splits_.erase(splits_.begin(), splits_.lower_bound({edit.drop_before_, 0}));
  }
  for (const auto& [k, s] : edit.added_) splits_[k] = s;
  unsaved_ = false;
}

}  // namespace strata::scheduler_internal
