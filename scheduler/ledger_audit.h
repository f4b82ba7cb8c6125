// Checking a data ledger's applied records (ledger.proto LedgerRecord) for
// the exactly-once promise, and writing them as JSON lines: what
// `strata ledger` does, and what tests assert on.
#ifndef STRATA_SCHEDULER_LEDGER_AUDIT_H_
#define STRATA_SCHEDULER_LEDGER_AUDIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/v1/ledger.pb.h"

namespace strata {

struct LedgerAudit {
  int64_t records = 0;
  int64_t samples = 0;  // applied, counting repeats
  // Data epochs before the last one seen, and the last if it is covered.
  int64_t epochs_finished = 0;
  int64_t duplicated = 0;  // samples applied more than once (extra times)
  // Samples never applied: of finished epochs, and holes in the last one
  // (before its furthest applied sample).
  int64_t missing = 0;
  // Samples leased or queued and not yet applied (in_flight records), which
  // close holes a job under way has: not missing.
  int64_t in_flight = 0;
  int64_t last_epoch = -1;         // the last data epoch seen
  int64_t last_epoch_covered = 0;  // its distinct samples applied
  int64_t epoch_samples = 0;

  bool exactly_once() const { return duplicated == 0 && missing == 0; }
  std::string ToString() const;
};

// Audits `records` (in_flight ones count as neither applied nor missing).
// INVALID_ARGUMENT for records that disagree on epoch_samples or lie
// outside their epoch.
absl::StatusOr<LedgerAudit> AuditLedger(
    const std::vector<v1::LedgerRecord>& records);

// One JSON object: {"epoch":E,"unit":U,"ranges":[[a,b]],"step":S,
// "worker":W,"incarnation":I,"member":M}, ranges half-open positions in
// data epoch E.
std::string LedgerRecordJson(const v1::LedgerRecord& r);

// The in_flight records of a ledger's state: the SSP/ASP leases' units and
// the queued ones (BSP steps apply in order: a step not yet applied leaves
// no hole before it).
std::vector<v1::LedgerRecord> InFlightRecords(const v1::LedgerState& state);

// Reads the applied records of the scheduler directory `data_dir`, then its
// in_flight ones (the scheduler must not be running there: the directory
// is claimed).
absl::StatusOr<std::vector<v1::LedgerRecord>> ReadLedgerDir(
    const std::string& data_dir);

// BSP: the number of steps the ledger in the scheduler directory
// `data_dir` has seen applied (every step below it), as ReadLedgerDir reads.
absl::StatusOr<int64_t> ReadLedgerAppliedSteps(const std::string& data_dir);

}  // namespace strata

#endif  // STRATA_SCHEDULER_LEDGER_AUDIT_H_
