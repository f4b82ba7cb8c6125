// The ledger's leasing side: cutting a step's samples into units and
// leasing them to workers (BSP: each worker's share of every step; SSP/ASP:
// units on demand), and the share arithmetic (Apportion).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "scheduler/ledger.h"
#include "scheduler/ledger_workers.h"
#include "spdlog/spdlog.h"

namespace strata::scheduler_internal {
namespace {

// Steps and sample numbers stay far from overflow.
constexpr int64_t kMaxSample = int64_t{1} << 60;

absl::Status NotALiveWorker(uint64_t id) {
  return absl::NotFoundError(absl::StrCat(
      "ledger: member ", id,
      " is not a live worker (its lease ran out or it never registered): "
      "register again"));
}

int64_t Samples(const google::protobuf::RepeatedPtrField<v1::WorkUnit>& units) {
  int64_t n = 0;
  for (const v1::WorkUnit& u : units) n += u.count();
  return n;
}

// The share counts of `workers` for a batch of `batch`.
absl::StatusOr<std::vector<int64_t>> Shares(
    int64_t batch, const std::vector<const v1::Member*>& workers) {
  if (static_cast<int64_t>(workers.size()) > batch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ledger: ", workers.size(), " live workers but a batch of ", batch,
        ": every worker needs at least one sample"));
  }
  std::vector<double> speeds;
  for (const v1::Member* m : workers) speeds.push_back(m->samples_per_sec());
  // No worker is weighted above twice the median: a bigger share often runs
  // at more samples/s (a GPU), which would feed back until one worker held
  // the whole batch.
  std::vector<double> sorted = speeds;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = (sorted[(n - 1) / 2] + sorted[n / 2]) / 2;
  for (double& v : speeds) v = std::min(v, 2 * median);
  return Apportion(batch, speeds);
}

bool SameJob(const v1::LedgerJob& a, const v1::LedgerJob& b) {
  return a.batch() == b.batch() &&
         a.samples_per_epoch() == b.samples_per_epoch() &&
         a.total_samples() == b.total_samples() && a.seed() == b.seed() &&
         std::equal(a.slots().begin(), a.slots().end(), b.slots().begin(),
                    b.slots().end());
}

std::string JobText(const v1::LedgerJob& j) {
  return absl::StrCat("batch ", j.batch(), ", ", j.samples_per_epoch(),
                      " samples per epoch, ", j.total_samples(),
                      " in all, seed ", j.seed(), ", slots [",
                      absl::StrJoin(j.slots(), ","), "]");
}

}  // namespace

std::vector<int64_t> Apportion(int64_t total,
                               const std::vector<double>& weights) {
  const size_t n = weights.size();
  bool usable = true;
  for (double w : weights) usable = usable && std::isfinite(w) && w > 0;
  std::vector<double> w = usable ? weights : std::vector<double>(n, 1.0);
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  // Each gets one, the rest in proportion, rounded down; the leftovers go to
  // the largest remainders.
  const int64_t rest = total - static_cast<int64_t>(n);
  std::vector<int64_t> out(n, 1);
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = static_cast<double>(rest) * w[i] / sum;
    const int64_t whole = std::min<int64_t>(
        rest - given, static_cast<int64_t>(std::floor(exact)));
    out[i] += whole;
    given += whole;
    remainders.push_back({exact - static_cast<double>(whole), i});
  }
  std::stable_sort(
      remainders.begin(), remainders.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < rest; k = (k + 1) % n, ++given)
    ++out[remainders[k].second];
  return out;
}

std::vector<v1::WorkUnit> Ledger::CutUnits(v1::LedgerState& s, int64_t first,
                                           int64_t count) {
  const int64_t per_epoch = s.job().samples_per_epoch();
  std::vector<v1::WorkUnit> units;
  while (count > 0) {
    const int64_t epoch = first / per_epoch;
    const int64_t n = std::min(count, (epoch + 1) * per_epoch - first);
    v1::WorkUnit u;
    u.set_id(s.next_unit_id());
    s.set_next_unit_id(s.next_unit_id() + 1);
    u.set_data_epoch(static_cast<uint64_t>(epoch));
    u.set_first(first);
    u.set_count(n);
    units.push_back(u);
    first += n;
    count -= n;
  }
  return units;
}

absl::Status Ledger::CheckJob(const v1::LedgerJob& job,
                              v1::LedgerState& s) const {
  if (job.batch() <= 0 || job.samples_per_epoch() <= 0 || job.slots().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ledger: a job needs batch > 0, samples_per_epoch > 0 "
                     "and at least one slot; got ",
                     JobText(job)));
  }
  for (int i = 0; i < job.slots_size(); ++i) {
    if (job.slots(i) < 0 || (i > 0 && job.slots(i) <= job.slots(i - 1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("ledger: slots must be distinct, sorted and >= 0; got ",
                       JobText(job)));
    }
  }
  if (!s.has_job()) {
    *s.mutable_job() = job;
    return absl::OkStatus();
  }
  if (!SameJob(s.job(), job)) {
    return absl::FailedPreconditionError(
        absl::StrCat("ledger: this worker's job (", JobText(job),
                     ") is not the scheduler's (", JobText(s.job()),
                     "): a worker of another job, or a scheduler directory "
                     "kept from one"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::LeaseWorkResponse> Ledger::Lease(
    const v1::LeaseWorkRequest& req, const v1::View& view) {
  if (req.step() < 0 || req.job().batch() <= 0 ||
      req.step() > kMaxSample / req.job().batch()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ledger: step ", req.step(), " is out of range"));
  }
  absl::MutexLock lock(&mu_);
  v1::LedgerState s = state_;
  SplitTable::Edit splits(splits_);
  STRATA_RETURN_IF_ERROR(CheckJob(req.job(), s));
  if (!view.consistency().empty() && view.consistency() != mode_.ToString()) {
    return absl::UnavailableError(absl::StrCat(
        "ledger: the job switched to ", mode_.ToString(), "; the view (",
        view.consistency(), ") follows at once: ask again"));
  }
  auto lease_one = [&](const v1::LeaseWorkRequest& r) {
    return mode_.mode == Consistency::kBsp ? LeaseBsp(r, view, s, splits)
                                           : LeaseAsync(r, view, s);
  };
  if (!InJob(s, req.step())) {
    // A worker's top-up of leases ahead at the job's last step: no split
    // is made for a step the job does not have.
    return absl::OutOfRangeError(
        absl::StrCat("ledger: step ", req.step(), " is past the job's end"));
  }
  absl::StatusOr<v1::LeaseWorkResponse> resp = lease_one(req);
  if (mode_.mode != Consistency::kBsp) NoteDrained(req.member_id(), resp);
  if (!resp.ok()) return resp.status();
  resp->set_step(req.step());
  // The steps ahead: as many as the job has, each leased as if asked alone.
  // The first that cannot be (the job's end, SSP/ASP samples all out)
  // ends them; its error is not the request's.
  const int ahead = std::min(std::clamp(req.ahead(), 0, kMaxLeaseAhead),
                             AsyncAheadLimit(s, view, Samples(resp->units())));
  v1::LeaseWorkRequest next = req;
  for (int i = 1; i <= ahead; ++i) {
    next.set_step(req.step() + i);
    if (!InJob(s, next.step())) break;
    absl::StatusOr<v1::LeaseWorkResponse> r = lease_one(next);
    if (!r.ok() || r->units().empty()) break;
    r->set_step(next.step());
    *resp->add_leased_ahead() = *std::move(r);
  }
  STRATA_RETURN_IF_ERROR(Commit(std::move(s), {}, &splits));
  return resp;
}

void Ledger::NoteDrained(uint64_t member,
                         const absl::StatusOr<v1::LeaseWorkResponse>& lease) {
  // LeaseAsync's answers when no sample is left to hand out.
  if (absl::IsUnavailable(lease.status()) ||
      absl::IsOutOfRange(lease.status())) {
    drained_.insert(member);
  } else if (lease.ok()) {
    drained_.erase(member);
  }
}

bool Ledger::Drained(uint64_t member) const {
  absl::MutexLock lock(&mu_);
  return drained_.contains(member);
}

int Ledger::AsyncAheadLimit(const v1::LedgerState& s, const v1::View& view,
                            int64_t per_lease) const {
  if (mode_.mode == Consistency::kBsp) return ahead_;
  const int64_t end = CursorEnd(s);
  if (end == kNoEnd) return ahead_;
  if (per_lease <= 0) return 0;
  const int64_t left =
      std::max<int64_t>(0, end - s.cursor()) + Samples(s.requeued());
  const int64_t workers =
      std::max<int64_t>(1, static_cast<int64_t>(Workers(view).size()));
  return static_cast<int>(
      std::min<int64_t>(ahead_, left / (2 * workers) / per_lease));
}

bool Ledger::InJob(const v1::LedgerState& s, int64_t step) const {
  const int64_t total = s.job().total_samples();
  if (mode_.mode != Consistency::kBsp || total <= 0) return true;
  return BspFirstSample(s, step) < total;
}

absl::StatusOr<v1::LeaseWorkResponse> Ledger::LeaseBsp(
    const v1::LeaseWorkRequest& req, const v1::View& view, v1::LedgerState& s,
    SplitTable::Edit& splits) {
  if (req.step() < s.bsp_base_step()) {
    return absl::OutOfRangeError(absl::StrCat("ledger: step ", req.step(), " ",
                                              kBeforeBackToBsp, " (",
                                              s.bsp_base_step(), ")"));
  }
  if (BspStepApplied(s, req.step())) {
    return absl::OutOfRangeError(absl::StrCat(
        "ledger: step ", req.step(), " is applied already; the job is at step ",
        s.applied_steps()));
  }
  if (s.has_pending_switch() && req.step() >= s.pending_switch().step()) {
    return absl::UnavailableError(
        absl::StrCat("ledger: the job switches to ", s.pending_switch().to(),
                     " at step ", s.pending_switch().step(),
                     " once every step before it is applied: ask again"));
  }
  const std::vector<const v1::Member*> workers = Workers(view);
  if (FindWorker(workers, req.member_id()) == nullptr)
    return NotALiveWorker(req.member_id());
  const uint64_t epoch = view.workers_epoch();
  const v1::LedgerState::Split* split = splits.Find(req.step(), epoch);
  if (split == nullptr) {
    STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> counts,
                            Shares(s.job().batch(), workers));
    v1::LedgerState::Split* made = splits.Add(req.step(), epoch);
    split = made;
    int64_t first = BspFirstSample(s, req.step());
    for (size_t i = 0; i < workers.size(); ++i) {
      v1::LedgerState::Share* share = made->add_shares();
      share->set_member_id(workers[i]->id());
      share->set_worker(workers[i]->worker());
      share->set_incarnation(workers[i]->incarnation());
      for (v1::WorkUnit& u : CutUnits(s, first, counts[i]))
        *share->add_units() = std::move(u);
      first += counts[i];
    }
  }
  v1::LeaseWorkResponse resp;
  resp.set_epoch(epoch);
  resp.set_workers(split->shares_size());
  resp.set_schedule_offset(s.schedule_offset());
  for (int i = 0; i < split->shares_size(); ++i) {
    const auto& share = split->shares(i);
    if (share.member_id() != req.member_id()) continue;
    resp.set_rank(i);
    *resp.mutable_units() = share.units();
    return resp;
  }
  // The split was made in this workers epoch without us: impossible, since
  // the set of workers defines the epoch; say so rather than hand out none.
  return absl::InternalError(
      absl::StrCat("ledger: step ", req.step(), " split in workers epoch ",
                   epoch, " lacks live worker ", req.member_id()));
}

absl::StatusOr<v1::LeaseWorkResponse> Ledger::LeaseAsync(
    const v1::LeaseWorkRequest& req, const v1::View& view, v1::LedgerState& s) {
  const std::vector<const v1::Member*> workers = Workers(view);
  const v1::Member* me = FindWorker(workers, req.member_id());
  if (me == nullptr) return NotALiveWorker(req.member_id());
  v1::LeaseWorkResponse resp;
  resp.set_epoch(view.epoch());
  for (const auto& lease : s.leases()) {
    if (lease.member_id() == req.member_id() && lease.step() == req.step()) {
      *resp.mutable_units() = lease.units();  // a retried request
      return resp;
    }
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> counts,
                          Shares(s.job().batch(), workers));
  const size_t rank =
      std::find(workers.begin(), workers.end(), me) - workers.begin();
  int64_t need = counts[rank];
  v1::LedgerState::Lease lease;
  lease.set_member_id(me->id());
  lease.set_step(req.step());
  lease.set_worker(me->worker());
  lease.set_incarnation(me->incarnation());
  // Handed-back units first, in order; the last one taken may be cut.
  auto* requeued = s.mutable_requeued();
  int taken = 0;
  for (; need > 0 && taken < requeued->size(); ++taken) {
    v1::WorkUnit& u = (*requeued)[taken];
    if (u.count() <= need) {
      need -= u.count();
      *lease.add_units() = u;
      continue;
    }
    for (v1::WorkUnit& part : CutUnits(s, u.first(), need))
      *lease.add_units() = std::move(part);
    u.set_first(u.first() + need);
    u.set_count(u.count() - need);
    need = 0;
    break;
  }
  requeued->DeleteSubrange(0, taken);
  const int64_t total = s.job().total_samples();
  need = std::min(need, std::max<int64_t>(0, CursorEnd(s) - s.cursor()));
  if (need > 0) {
    if (s.cursor() > kMaxSample - need)
      return absl::OutOfRangeError("ledger: the sample numbers ran out");
    for (v1::WorkUnit& u : CutUnits(s, s.cursor(), need))
      *lease.add_units() = std::move(u);
    s.set_cursor(s.cursor() + need);
  }
  if (lease.units().empty() && s.has_pending_switch()) {
    // Back to BSP: its steps take the samples from here on.
    return absl::UnavailableError(
        absl::StrCat("ledger: the job switches back to bsp once the ",
                     s.leases_size(), " lease(s) out are applied: ask again"));
  }
  if (lease.units().empty()) {
    // Every sample is handed out. Leases still out may come back (a worker
    // that dies): until they are applied the job is not over.
    if (s.leases_size() > 0) {
      return absl::UnavailableError(
          absl::StrCat("ledger: every sample is handed out; ", s.leases_size(),
                       " lease(s) are not applied yet"));
    }
    return absl::OutOfRangeError(
        absl::StrCat("ledger: all ", total, " samples of the job are applied"));
  }
  *resp.mutable_units() = lease.units();
  *s.add_leases() = std::move(lease);
  s.set_async_bound(s.async_bound() + 1);
  return resp;
}

}  // namespace strata::scheduler_internal
