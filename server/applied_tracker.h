// Which updates every chunk of a shard has applied, for the data ledger
// (scheduler/ledger.h): a BSP step counts once each chunk closed it, an
// SSP/ASP push once each chunk applied it.
#ifndef STRATA_SERVER_APPLIED_TRACKER_H_
#define STRATA_SERVER_APPLIED_TRACKER_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "server/shard_options.h"
#include "strata/v1/ledger.pb.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Thread-safe.
class AppliedTracker {
 public:
  // Notes that one chunk applied (step, worker) — worker 0 for a closed BSP
  // step — computed in `epoch`. Returns the report (slot unset) when this
  // was the last of `num_chunks` chunks; each chunk notes an update once.
  std::optional<v1::AppliedReport> Note(int64_t step, uint64_t worker,
                                        uint64_t epoch, size_t num_chunks) {
    absl::MutexLock lock(&mu_);
    Entry& e = entries_[{step, worker}];
    ++e.chunks;
    e.epoch = std::max(e.epoch, epoch);
    if (e.chunks < num_chunks) return std::nullopt;
    v1::AppliedReport r;
    r.set_step(step);
    r.set_worker_member_id(worker);
    r.set_epoch(e.epoch);
    entries_.erase({step, worker});
    return r;
  }

  // Forgets the entries of workers for which `live` is false (a worker that
  // left mid-push: its units are handed out again). Entry 0 stays.
  void Forget(absl::FunctionRef<bool(uint64_t)> live) {
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->first.second != 0 && !live(it->first.second)) {
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Forgets every entry (the shard rolled back).
  void Clear() {
    absl::MutexLock lock(&mu_);
    entries_.clear();
  }

  // Partly applied updates, for a joining replica (Shard::ExportState): as
  // state entries, and replacing these from them.
  void Export(v1::ShardStateHeader* out) const {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, e] : entries_) {
      v1::AppliedEntryState* a = out->add_applied();
      a->set_step(key.first);
      a->set_worker(key.second);
      a->set_chunks(e.chunks);
      a->set_epoch(e.epoch);
    }
  }
  void Import(const v1::ShardStateHeader& in) {
    absl::MutexLock lock(&mu_);
    entries_.clear();
    for (const v1::AppliedEntryState& a : in.applied()) {
      entries_[{a.step(), a.worker()}] =
          Entry{static_cast<size_t>(a.chunks()), a.epoch()};
    }
  }

  size_t pending() const {
    absl::MutexLock lock(&mu_);
    return entries_.size();
  }

 private:
  struct Entry {
    size_t chunks = 0;
    uint64_t epoch = 0;
  };
  mutable absl::Mutex mu_;
  absl::btree_map<std::pair<int64_t, uint64_t>, Entry> entries_
      ABSL_GUARDED_BY(mu_);
};

// An AppliedTracker and the sink its complete reports go to
// (Shard::set_applied_sink). Thread-safe.
class AppliedReports {
 public:
  // Notes that a chunk in rollback `generation` applied (step, worker) as
  // AppliedTracker::Note; the last of `num_chunks` calls the sink.
  void Note(uint64_t generation, int64_t step, uint64_t worker, uint64_t epoch,
            size_t num_chunks) {
    std::optional<v1::AppliedReport> done =
        tracker_.Note(step, worker, epoch, num_chunks);
    if (!done.has_value()) return;
    done->set_generation(generation);
    absl::MutexLock lock(&mu_);
    if (sink_) sink_(*done);
  }
  void set_sink(AppliedSink sink) {
    absl::MutexLock lock(&mu_);
    sink_ = std::move(sink);
  }
  // AppliedTracker::Forget and Clear.
  void Forget(absl::FunctionRef<bool(uint64_t)> live) { tracker_.Forget(live); }
  void Clear() { tracker_.Clear(); }
  void Export(v1::ShardStateHeader* out) const { tracker_.Export(out); }
  void Import(const v1::ShardStateHeader& in) { tracker_.Import(in); }

 private:
  AppliedTracker tracker_;
  absl::Mutex mu_;
  AppliedSink sink_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_APPLIED_TRACKER_H_
