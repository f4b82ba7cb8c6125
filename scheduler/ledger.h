// The data ledger: the scheduler's record of which samples each worker
// computes and which were applied, so that every sample of the job is
// applied exactly once while workers come, go and die. Private to
// scheduler/; the gRPC handlers call it. DESIGN.md §3.
//
// Samples are numbered globally (ledger.proto); a work unit is a run of them
// inside one data epoch, with an id.
//
// BSP: step t's samples are [t*B, (t+1)*B), B the global batch. The first
// worker to ask for step t in a workers epoch splits them among that epoch's
// live workers, in member-id order, each share in proportion to the worker's
// reported samples/s (equal shares while any speed is unknown; no speed
// counted above twice the median), at least one sample each; every worker of
// the epoch gets the same split. A worker that
// dies or joins mid-step changes the workers epoch, the servers drop the
// step's pushes and the survivors ask again: the same samples, split anew.
// A step counts as applied when every slot of the job has reported it
// closed; its records are the split of the workers epoch it closed in.
//
// SSP/ASP: a worker asking for its clock t gets units totalling its share
// of B (as above, over the live workers): units handed back first, then new
// ones from the cursor, until job.total_samples were handed out. The
// lease counts as applied when every slot has
// reported that worker's push of clock t. Leases of a worker that leaves the
// view go back to the front of the queue (Sweep); if such a worker's push
// is then reported applied everywhere before its units were handed out
// again, they are recorded as applied by it and taken off the queue; if they
// were handed out already, the application is counted as `late` (the push
// raced the lease running out on the servers).
//
// --consistency auto switches the ledger's mode live (BeginSwitch): from
// SSP/ASP to SSP/ASP at once, looser or tighter (both lease from the
// cursor); from BSP at a
// fence step F, the first step no worker holds a lease of: steps from F on
// are refused (UNAVAILABLE) until every step before F is applied, then the
// cursor starts at F's first sample and the job runs asynchronously from
// clock F. So no sample before it is leased again and none after it was
// applied by a BSP step. From SSP/ASP back to BSP: leases go on from the
// cursor up to A, the first sample from which whole batches end at the
// job's end (a multiple of B when the job's samples are), then are refused
// (UNAVAILABLE); handed-back units are still leased. Once every lease is
// applied and none is queued, BSP starts at step F = async_bound (past
// every chunk's version and every clock leased: the servers move each
// chunk's version up to F), its steps covering the samples from A, and
// the learning-rate schedule's step of F is A / B (View.schedule_offset).
// Leases are refused while the view's consistency is not the ledger's (the
// scheduler publishes the switch in the view just after it).
//
// BSP steps can be applied out of order: a slot's reports held back by a
// scheduler outage complete a step after later ones. applied_steps moves
// over a run of applied steps only; those applied past it are kept in
// closed_ahead (each counts as applied: its leases are OUT_OF_RANGE, its
// reports duplicates).
//
// Every change is written to the StateStore before it is visible, so a
// restarted scheduler continues at the same cursor.
#ifndef STRATA_SCHEDULER_LEDGER_H_
#define STRATA_SCHEDULER_LEDGER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/consistency.h"
#include "scheduler/ledger_splits.h"
#include "scheduler/state_store.h"
#include "strata/v1/common.pb.h"
#include "strata/v1/ledger.pb.h"

namespace strata::scheduler_internal {

// Splits `total` into one count per weight, each >= 1, summing to `total`,
// in proportion to the weights (largest remainder; ties to the lower index).
// Weights that are not all finite and > 0 give equal shares. REQUIRES:
// total >= weights.size() > 0.
std::vector<int64_t> Apportion(int64_t total,
                               const std::vector<double>& weights);

// The most steps a lease may take ahead of the one asked for: a 30 s
// scheduler outage at 68 steps/s (15 ms a step). Each BSP step leased ahead
// is a split (tens of bytes a worker, stored under its own key: a lease of
// 2048 steps ahead writes about 150 KB once).
inline constexpr int kMaxLeaseAhead = 2048;
// An auto job's (--consistency auto) steps leased ahead, BSP steps or
// SSP/ASP clocks: a switch from BSP lands this many steps after it is
// decided at most, a switch back waits for each worker's leases ahead
// (this many of its steps at most), and a scheduler outage longer than
// this many steps pauses the job.
inline constexpr int kAutoLeaseAhead = 8;

// BSP: whether `step` is applied in `s` (below applied_steps, or in
// closed_ahead).
bool BspStepApplied(const v1::LedgerState& s, int64_t step);
// BSP: the first sample of `step` in `s` (step * batch for a job that
// never left BSP; see bsp_base_step).
int64_t BspFirstSample(const v1::LedgerState& s, int64_t step);
// BSP: notes `step` applied in `s`, moving applied_steps over the run of
// applied steps it completes.
void NoteBspStepApplied(v1::LedgerState& s, int64_t step);

class Ledger {
 public:
  // Restores `state` and the applied records (by rising sequence number).
  // REQUIRES: `store` outlives the ledger.
  // `splits`: the BSP splits stored under their own keys
  // (PersistedState::ledger_splits).
  Ledger(Consistency mode, StateStore* store, v1::LedgerState state,
         std::vector<std::pair<uint64_t, v1::LedgerRecord>> applied,
         std::vector<v1::LedgerState::Split> splits = {});

  // A worker's samples for a step, as ledger.proto says, given the current
  // view. Errors: INVALID_ARGUMENT (a malformed job or step), NOT_FOUND (not
  // a live worker: register again), FAILED_PRECONDITION (another job's
  // ledger; more live workers than samples per step), OUT_OF_RANGE (a BSP
  // step already applied or past the job's end; SSP/ASP: every sample of the
  // job applied), UNAVAILABLE (SSP/ASP: every sample handed out, some not yet
  // applied: ask again later), storage errors (nothing changed). With
  // req.ahead, the next steps' leases too (leased_ahead), as many as can be
  // made.
  absl::StatusOr<v1::LeaseWorkResponse> Lease(const v1::LeaseWorkRequest& req,
                                              const v1::View& view);
  // SSP/ASP: whether `member`'s last ask for a step of its own found every
  // sample handed out (UNAVAILABLE or OUT_OF_RANGE above); a lease with
  // samples clears it. The scheduler shows it in the view (Member.drained)
  // so that SSP pulls do not wait for a worker that has nothing to push.
  // Not stored: a restarted scheduler learns it at the worker's next ask.
  bool Drained(uint64_t member) const;

  // Records servers' reports; those of another rollback generation than
  // the view's are ignored. PERMISSION_DENIED unless req.member_id() is
  // the live server of every report's slot; INVALID_ARGUMENT for a slot
  // outside the job's; FAILED_PRECONDITION before any lease fixed the job.
  absl::StatusOr<v1::ReportAppliedResponse> Report(
      const v1::ReportAppliedRequest& req, const v1::View& view);

  // SSP/ASP: hands the leases of workers not in `view` back (see above).
  absl::Status Sweep(const v1::View& view);

  // BSP: forgets that steps >= `step` were applied (their records, splits
  // and reports), as when the servers roll back to a snapshot of `step`.
  absl::Status RollBack(int64_t step);
  // Whether a server's restart rolls the job back: a BSP job that never
  // switched (snapshots are consistent under BSP only, and one taken
  // before a switch would undo SSP/ASP updates the ledger recorded).
  bool RollsBack() const;

  // A rollback written in someone else's write batch, so that it and the
  // change that causes it (the view's new generation) are stored at once:
  // a scheduler killed between two writes would restart with one and not
  // the other. Holds the ledger's lock from BeginRollBack to its end, so no
  // report or lease lands between the state it was computed from and its
  // adoption. Use: BeginRollBack; read state(); To(step, batch) to add the
  // rollback to the batch; write the batch; Adopt() once it is stored.
  // Ending without Adopt leaves the ledger as it was (the write failed).
  class PendingRollback {
   public:
    ~PendingRollback();
    PendingRollback(const PendingRollback&) = delete;
    PendingRollback& operator=(const PendingRollback&) = delete;
    // The ledger's state as of BeginRollBack (unchanged while this lives).
    const v1::LedgerState& state() const;
    // Adds the rollback to `step` to `batch`. REQUIRES: BSP; called once.
    void To(int64_t step, StateBatch& batch);
    // Takes the rollback To added as the ledger's own (its batch is stored).
    void Adopt();

   private:
    friend class Ledger;
    explicit PendingRollback(Ledger* ledger);
    Ledger* const ledger_;
    std::optional<int64_t> step_;
    v1::LedgerState next_;
    std::vector<std::pair<uint64_t, v1::LedgerRecord>> kept_;
    std::optional<SplitTable::Edit> splits_;
  };
  // Locks the ledger until the result ends. UNIMPLEMENTED unless the job
  // rolls back (RollsBack).
  absl::StatusOr<std::unique_ptr<PendingRollback>> BeginRollBack();

  // The applied records, in the order they were applied.
  std::vector<v1::LedgerRecord> Applied() const;
  // Applied(), then the in_flight records (ledger_audit.h InFlightRecords),
  // read at one moment: what ExportLedger sends.
  std::vector<v1::LedgerRecord> Export() const;
  // A copy of the state (tests, status).
  v1::LedgerState State() const;
  // The mode the job runs now.
  Consistency mode() const;

  // The live switch (see above; scheduler/consistency_switcher.h decides
  // it). Begins a switch to `to`, decided for `reason` at `unix_ms`: done at
  // once between SSP/ASP modes (the switch made; a tighter bound counts
  // from the switch on the servers), pending from BSP (its fence in
  // `step`) and to BSP (its first sample A in `first_sample`; its step is
  // fixed when it is made). FAILED_PRECONDITION while one is pending, to
  // the mode the job runs, and to BSP once every sample is handed out;
  // storage errors (nothing changed).
  absl::StatusOr<v1::ConsistencySwitch> BeginSwitch(const Consistency& to,
                                                    std::string reason,
                                                    int64_t unix_ms);
  // The pending switch, done once every step before its fence is applied
  // (to BSP: every lease applied, none queued, the cursor at A), then
  // returned; nullopt while none is pending or it waits.
  absl::StatusOr<std::optional<v1::ConsistencySwitch>> MaybeCompleteSwitch();
  // Drops a pending switch; OK when none is pending.
  absl::Status CancelSwitch();
  // At most `steps` steps (BSP) or clocks (SSP/ASP) leased ahead of the
  // one asked for (default kMaxLeaseAhead). A switch waits for the leases
  // ahead, so an auto job keeps this short (kAutoLeaseAhead).
  void LimitAhead(int steps);

 private:
  // SSP/ASP: how many leases of `per_lease` samples a worker may take
  // ahead: at most half its even part of the samples not yet handed out,
  // so that no other worker waits for samples held ahead by this one (under
  // SSP it could not catch up, and this one could not go on past it) and
  // the job's end waits on no long tail of them; and LimitAhead's
  // (kMaxLeaseAhead unless limited), as for BSP.
  int AsyncAheadLimit(const v1::LedgerState& s, const v1::View& view,
                      int64_t per_lease) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Keeps drained_ (Drained) after `member`'s SSP/ASP ask for its own step.
  void NoteDrained(uint64_t member,
                   const absl::StatusOr<v1::LeaseWorkResponse>& lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool RollsBackLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // BeginSwitch's and MaybeCompleteSwitch's parts for a switch back to
  // BSP (ledger_switch.cc).
  absl::StatusOr<v1::ConsistencySwitch> BeginBackToBsp(v1::ConsistencySwitch sw)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::optional<v1::ConsistencySwitch>> CompleteBackToBsp()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SSP/ASP: the end of the samples the cursor may hand out now (a switch
  // back to BSP stops it at its first sample; else the job's end, kNoEnd
  // for none).
  static constexpr int64_t kNoEnd = INT64_MAX;
  static int64_t CursorEnd(const v1::LedgerState& s);
  // Whether a BSP step is inside the job (total_samples; SSP/ASP: always,
  // their leases end when the samples do).
  bool InJob(const v1::LedgerState& s, int64_t step) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The pieces of [first, first + count) cut at data epoch ends, each with
  // a new id from `s`.
  static std::vector<v1::WorkUnit> CutUnits(v1::LedgerState& s, int64_t first,
                                            int64_t count);
  absl::Status CheckJob(const v1::LedgerJob& job, v1::LedgerState& s) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::LeaseWorkResponse> LeaseBsp(
      const v1::LeaseWorkRequest& req, const v1::View& view, v1::LedgerState& s,
      SplitTable::Edit& splits) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::LeaseWorkResponse> LeaseAsync(
      const v1::LeaseWorkRequest& req, const v1::View& view, v1::LedgerState& s)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Applies one report to `s`, appending completed records to `out`.
  // Returns whether it recorded anything.
  bool ApplyReport(const v1::AppliedReport& r, v1::LedgerState& s,
                   SplitTable::Edit& splits,
                   std::vector<v1::LedgerRecord>& out) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ApplyReport's parts. NoteSlot counts the report's slot for the update
  // (`who`: its worker, 0 for a BSP step); false for a duplicate or an
  // update no lease knows; *done is the entry once every slot applied it.
  bool NoteSlot(const v1::AppliedReport& r, uint64_t who, v1::LedgerState& s,
                std::optional<v1::LedgerState::Pending>* done) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Records a closed BSP step's split, and drops the splits before it.
  void RecordStep(const v1::LedgerState::Pending& done, v1::LedgerState& s,
                  SplitTable::Edit& splits,
                  std::vector<v1::LedgerRecord>& out) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Records an SSP/ASP push's lease (or what is left of an orphan's);
  // false for one evicted while pending.
  bool RecordPush(const v1::LedgerState::Pending& done, uint64_t who,
                  v1::LedgerState& s, std::vector<v1::LedgerRecord>& out) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Writes `s` and `records` (numbered from s.next_record on) and adopts
  // them.
  absl::Status Commit(v1::LedgerState s, std::vector<v1::LedgerRecord> records,
                      const SplitTable::Edit* splits = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::LedgerRecord Record(const v1::WorkUnit& u, int64_t step, uint64_t worker,
                          uint64_t incarnation, uint64_t member) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  StateStore* const store_;
  mutable absl::Mutex mu_;
  // The mode the job runs now: the scheduler's setting, or the last switch
  // (state_.mode).
  Consistency mode_ ABSL_GUARDED_BY(mu_);
  int ahead_ ABSL_GUARDED_BY(mu_) = kMaxLeaseAhead;
  v1::LedgerState state_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, v1::LedgerRecord>> applied_
      ABSL_GUARDED_BY(mu_);
  SplitTable splits_ ABSL_GUARDED_BY(mu_);  // BSP splits, outside state_
  absl::flat_hash_set<uint64_t> drained_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::scheduler_internal

#endif  // STRATA_SCHEDULER_LEDGER_H_
