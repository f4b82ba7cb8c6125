#include "scheduler/ledger.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/status.h"
#include "scheduler/ledger_audit.h"
#include "scheduler/ledger_workers.h"
#include "spdlog/spdlog.h"

namespace strata::scheduler_internal {
namespace {

// Orphaned leases kept to match late reports against.
constexpr int kMaxOrphans = 256;
// A departed worker's leases that may have pushes in flight: its lowest
// clocks (it computes them in order, one or two overlapped). The rest were
// leased ahead (cluster/lease_ahead.h) and never started; orphaning them
// too would push the ones that matter out of the kMaxOrphans.
constexpr int64_t kInFlightClocks = 4;

}  // namespace

bool BspStepApplied(const v1::LedgerState& s, int64_t step) {
  return step < s.applied_steps() ||
         std::binary_search(s.closed_ahead().begin(), s.closed_ahead().end(),
                            step);
}

int64_t BspFirstSample(const v1::LedgerState& s, int64_t step) {
  return s.bsp_base_sample() + (step - s.bsp_base_step()) * s.job().batch();
}

void NoteBspStepApplied(v1::LedgerState& s, int64_t step) {
  auto* ahead = s.mutable_closed_ahead();
  if (BspStepApplied(s, step)) return;
  if (step > s.applied_steps()) {
    ahead->Add(step);
    std::sort(ahead->begin(), ahead->end());
    return;
  }
  // The run goes on over the steps applied past it.
  int64_t next = step + 1;
  int taken = 0;
  while (taken < ahead->size() && ahead->Get(taken) == next) {
    ++next;
    ++taken;
  }
  ahead->erase(ahead->begin(), ahead->begin() + taken);
  s.set_applied_steps(next);
}

Ledger::Ledger(Consistency mode, StateStore* store, v1::LedgerState state,
               std::vector<std::pair<uint64_t, v1::LedgerRecord>> applied,
               std::vector<v1::LedgerState::Split> splits)
    : store_(store),
      state_(std::move(state)),
      applied_(std::move(applied)),
      splits_(std::move(splits),
              {state_.splits().begin(), state_.splits().end()}) {
  state_.clear_splits();
  // A switched job goes on in the mode it switched to.
  absl::StatusOr<Consistency> now = ParseConsistency(state_.mode());
  mode_ = state_.mode().empty() || !now.ok() ? mode : *now;
}

absl::StatusOr<v1::ReportAppliedResponse> Ledger::Report(
    const v1::ReportAppliedRequest& req, const v1::View& view) {
  absl::MutexLock lock(&mu_);
  if (!state_.has_job()) {
    return absl::FailedPreconditionError(
        "ledger: no job yet (no worker has leased work)");
  }
  for (const v1::AppliedReport& r : req.reports()) {
    const auto& slots = state_.job().slots();
    if (std::find(slots.begin(), slots.end(), r.slot()) == slots.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ledger: slot ", r.slot(), " holds no chunks of this job"));
    }
    bool owner = false;
    // Any replica of the slot: each applied what the primary acknowledged,
    // and a backup's reports stand for a primary that died before sending
    // its own (duplicates are ignored).
    for (const v1::ShardSlot& slot : view.shard_map().slots()) {
      if (slot.shard() != r.slot() || req.member_id() == 0) continue;
      owner = owner || slot.member_id() == req.member_id();
      for (const v1::ShardReplica& b : slot.backups()) {
        owner = owner || b.member_id() == req.member_id();
      }
    }
    if (!owner) {
      return absl::PermissionDeniedError(
          absl::StrCat("ledger: member ", req.member_id(),
                       " is not a live server of slot ", r.slot()));
    }
  }
  v1::LedgerState s = state_;
  SplitTable::Edit splits(splits_);
  std::vector<v1::LedgerRecord> records;
  v1::ReportAppliedResponse resp;
  for (const v1::AppliedReport& r : req.reports()) {
    // An update of another rollback generation: the job rolled back past
    // it (or the server has not rolled back yet); it does not count.
    if (r.generation() == view.generation() &&
        ApplyReport(r, s, splits, records)) {
      resp.set_recorded(resp.recorded() + 1);
    } else {
      resp.set_ignored(resp.ignored() + 1);
    }
  }
  STRATA_RETURN_IF_ERROR(Commit(std::move(s), std::move(records), &splits));
  return resp;
}

v1::LedgerRecord Ledger::Record(const v1::WorkUnit& u, int64_t step,
                                uint64_t worker, uint64_t incarnation,
                                uint64_t member) const {
  v1::LedgerRecord r;
  r.set_data_epoch(u.data_epoch());
  r.set_unit(u.id());
  r.set_first(u.first() - static_cast<int64_t>(u.data_epoch()) *
                              state_.job().samples_per_epoch());
  r.set_count(u.count());
  r.set_step(step);
  r.set_worker(worker);
  r.set_incarnation(incarnation);
  r.set_member_id(member);
  r.set_epoch_samples(state_.job().samples_per_epoch());
  return r;
}

bool Ledger::ApplyReport(const v1::AppliedReport& r, v1::LedgerState& s,
                         SplitTable::Edit& splits,
                         std::vector<v1::LedgerRecord>& out) const {
  const bool bsp = mode_.mode == Consistency::kBsp;
  const uint64_t who = bsp ? 0 : r.worker_member_id();
  std::optional<v1::LedgerState::Pending> done;
  if (!NoteSlot(r, who, s, &done)) return false;
  if (!done.has_value()) return true;  // other slots have yet to apply it
  if (bsp) {
    RecordStep(*done, s, splits, out);
    return true;
  }
  return RecordPush(*done, who, s, out);
}

bool Ledger::NoteSlot(const v1::AppliedReport& r, uint64_t who,
                      v1::LedgerState& s,
                      std::optional<v1::LedgerState::Pending>* done) const {
  const bool bsp = mode_.mode == Consistency::kBsp;
  auto* pending = s.mutable_pending();
  auto p = std::find_if(pending->begin(), pending->end(), [&](const auto& e) {
    return e.step() == r.step() && e.worker_member_id() == who;
  });
  if (p == pending->end()) {
    // A new entry: only for work that is out and not yet applied.
    bool known = false;
    if (bsp) {
      known = !BspStepApplied(s, r.step());
    } else {
      for (const auto* list : {&s.leases(), &s.orphans()}) {
        for (const auto& l : *list)
          known = known || (l.member_id() == who && l.step() == r.step());
      }
    }
    if (!known) {
      s.set_duplicates(s.duplicates() + 1);
      return false;
    }
    v1::LedgerState::Pending* fresh = pending->Add();
    fresh->set_step(r.step());
    fresh->set_worker_member_id(who);
    p = pending->end() - 1;
  }
  if (std::find(p->slots().begin(), p->slots().end(), r.slot()) !=
      p->slots().end()) {
    s.set_duplicates(s.duplicates() + 1);  // this slot said so before
    return false;
  }
  p->add_slots(r.slot());
  p->set_epoch(std::max(p->epoch(), r.epoch()));
  if (p->slots_size() < s.job().slots_size()) return true;
  // Complete: every slot applied it.
  *done = *p;
  pending->erase(p);
  return true;
}

void Ledger::RecordStep(const v1::LedgerState::Pending& done,
                        v1::LedgerState& s, SplitTable::Edit& splits,
                        std::vector<v1::LedgerRecord>& out) const {
  const v1::LedgerState::Split* split = splits.Find(done.step(), done.epoch());
  if (split == nullptr) {
    spdlog::error(
        "ledger: step {} closed in workers epoch {}, which has no split; "
        "its samples are not recorded",
        done.step(), done.epoch());
  } else {
    for (const auto& share : split->shares()) {
      for (const v1::WorkUnit& u : share.units()) {
        out.push_back(Record(u, done.step(), share.worker(),
                             share.incarnation(), share.member_id()));
      }
    }
  }
  NoteBspStepApplied(s, done.step());
  splits.DropBefore(s.applied_steps());
}

bool Ledger::RecordPush(const v1::LedgerState::Pending& done, uint64_t who,
                        v1::LedgerState& s,
                        std::vector<v1::LedgerRecord>& out) const {
  auto matches = [&](const v1::LedgerState::Lease& l) {
    return l.member_id() == who && l.step() == done.step();
  };
  auto* leases = s.mutable_leases();
  if (auto l = std::find_if(leases->begin(), leases->end(), matches);
      l != leases->end()) {
    for (const v1::WorkUnit& u : l->units())
      out.push_back(Record(u, l->step(), l->worker(), l->incarnation(), who));
    leases->erase(l);
    return true;
  }
  // An orphan: its units went back to the queue. What is still queued of
  // them (a unit keeps its id when another lease cut a part off its front)
  // is taken back and recorded; what was handed out again will be applied
  // twice.
  auto* orphans = s.mutable_orphans();
  auto o = std::find_if(orphans->begin(), orphans->end(), matches);
  if (o == orphans->end()) return false;  // evicted while pending
  auto* requeued = s.mutable_requeued();
  for (const v1::WorkUnit& u : o->units()) {
    auto q = std::find_if(requeued->begin(), requeued->end(),
                          [&](const auto& x) { return x.id() == u.id(); });
    int64_t taken_back = 0;
    if (q != requeued->end()) {
      taken_back = q->count();
      out.push_back(Record(*q, o->step(), o->worker(), o->incarnation(), who));
      requeued->erase(q);
    }
    if (taken_back < u.count()) {
      s.set_late(s.late() + 1);
      spdlog::warn(
          "ledger: member {}'s push of clock {} was applied after its lease "
          "was handed back; {} sample(s) of unit {} were handed out again",
          who, o->step(), u.count() - taken_back, u.id());
    }
  }
  orphans->erase(o);
  return true;
}

absl::Status Ledger::Sweep(const v1::View& view) {
  absl::MutexLock lock(&mu_);
  if (mode_.mode == Consistency::kBsp) return absl::OkStatus();
  const std::vector<const v1::Member*> workers = Workers(view);
  bool gone = false;
  for (const auto& l : state_.leases())
    gone = gone || FindWorker(workers, l.member_id()) == nullptr;
  if (!gone) return absl::OkStatus();
  v1::LedgerState s = state_;
  // Each departed member's lowest leased clock.
  absl::flat_hash_map<uint64_t, int64_t> lowest;
  for (const auto& l : s.leases()) {
    if (FindWorker(workers, l.member_id()) != nullptr) continue;
    auto [it, fresh] = lowest.emplace(l.member_id(), l.step());
    if (!fresh) it->second = std::min(it->second, l.step());
  }
  google::protobuf::RepeatedPtrField<v1::WorkUnit> front;
  auto* leases = s.mutable_leases();
  for (auto l = leases->begin(); l != leases->end();) {
    if (FindWorker(workers, l->member_id()) != nullptr) {
      ++l;
      continue;
    }
    for (const v1::WorkUnit& u : l->units()) *front.Add() = u;
    if (l->step() < lowest[l->member_id()] + kInFlightClocks) {
      *s.add_orphans() = *l;
    }
    l = leases->erase(l);
  }
  for (const auto& [member, clock] : lowest) {
    spdlog::info(
        "ledger: member {} left with clocks from {} leased; their units go "
        "back to the queue",
        member, clock);
  }
  front.MergeFrom(s.requeued());
  s.mutable_requeued()->Swap(&front);
  if (s.orphans_size() > kMaxOrphans) {
    s.mutable_orphans()->DeleteSubrange(0, s.orphans_size() - kMaxOrphans);
  }
  return Commit(std::move(s), {});
}

absl::Status Ledger::RollBack(int64_t step) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PendingRollback> pending,
                          BeginRollBack());
  StateBatch batch;
  pending->To(step, batch);
  STRATA_RETURN_IF_ERROR(store_->Write(batch));
  pending->Adopt();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Ledger::PendingRollback>>
Ledger::BeginRollBack() {
  // Locks the ledger, so the mode checked is the one rolled back in.
  std::unique_ptr<PendingRollback> pending(new PendingRollback(this));
  mu_.AssertHeld();
  if (!RollsBackLocked()) {
    return absl::UnimplementedError(absl::StrCat(
        "ledger: rolling back is defined for BSP jobs that never switched "
        "(a snapshot from before a switch would undo the SSP/ASP updates "
        "recorded since); this one runs ",
        mode_.ToString(), " after ", state_.switches_size(), " switch(es)"));
  }
  return pending;
}

bool Ledger::RollsBack() const {
  absl::MutexLock lock(&mu_);
  return RollsBackLocked();
}

bool Ledger::RollsBackLocked() const {
  return mode_.mode == Consistency::kBsp && state_.switches_size() == 0;
}

Ledger::PendingRollback::PendingRollback(Ledger* ledger) : ledger_(ledger) {
  ledger_->mu_.Lock();
}

Ledger::PendingRollback::~PendingRollback() { ledger_->mu_.Unlock(); }

const v1::LedgerState& Ledger::PendingRollback::state() const {
  return ledger_->state_;
}

void Ledger::PendingRollback::To(int64_t step, StateBatch& batch) {
  STRATA_CHECK(!step_.has_value());
  step_ = step;
  next_ = ledger_->state_;
  next_.set_applied_steps(std::min(next_.applied_steps(), step));
  auto* ahead = next_.mutable_closed_ahead();
  ahead->erase(std::lower_bound(ahead->begin(), ahead->end(), step),
               ahead->end());
  next_.clear_pending();
  splits_.emplace(ledger_->splits_);
  splits_->DropAll();
  splits_->Write(batch);
  for (const auto& [seq, rec] : ledger_->applied_) {
    if (rec.step() >= step) {
      batch.DeleteLedgerRecord(seq);
    } else {
      kept_.emplace_back(seq, rec);
    }
  }
  batch.PutLedgerState(next_);
}

void Ledger::PendingRollback::Adopt() {
  if (!step_.has_value()) return;
  spdlog::info("ledger: rolled back to step {} ({} record(s) dropped)", *step_,
               ledger_->applied_.size() - kept_.size());
  ledger_->state_ = std::move(next_);
  ledger_->applied_ = std::move(kept_);
  ledger_->splits_.Adopt(*splits_);
  step_.reset();
}

absl::Status Ledger::Commit(v1::LedgerState s,
                            std::vector<v1::LedgerRecord> records,
                            const SplitTable::Edit* splits) {
  StateBatch batch;
  if (splits != nullptr) splits->Write(batch);
  std::vector<std::pair<uint64_t, v1::LedgerRecord>> numbered;
  for (v1::LedgerRecord& r : records) {
    const uint64_t seq = s.next_record();
    s.set_next_record(seq + 1);
    batch.PutLedgerRecord(seq, r);
    numbered.emplace_back(seq, std::move(r));
  }
  batch.PutLedgerState(s);
  STRATA_RETURN_IF_ERROR(store_->Write(batch));
  state_ = std::move(s);
  if (splits != nullptr) splits_.Adopt(*splits);
  for (auto& n : numbered) applied_.push_back(std::move(n));
  return absl::OkStatus();
}

std::vector<v1::LedgerRecord> Ledger::Applied() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LedgerRecord> out;
  out.reserve(applied_.size());
  for (const auto& [seq, rec] : applied_) out.push_back(rec);
  return out;
}

std::vector<v1::LedgerRecord> Ledger::Export() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LedgerRecord> out;
  out.reserve(applied_.size());
  for (const auto& [seq, rec] : applied_) out.push_back(rec);
  for (v1::LedgerRecord& r : InFlightRecords(state_))
    out.push_back(std::move(r));
  return out;
}

v1::LedgerState Ledger::State() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

Consistency Ledger::mode() const {
  absl::MutexLock lock(&mu_);
  return mode_;
}

}  // namespace strata::scheduler_internal
