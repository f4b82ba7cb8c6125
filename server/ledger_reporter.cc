#include "server/ledger_reporter.h"

#include <algorithm>
#include <vector>

#include "spdlog/spdlog.h"

namespace strata {
namespace {

constexpr size_t kMaxBatch = 1024;
constexpr absl::Duration kMinBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);
// How long a batch the scheduler refuses (e.g. PERMISSION_DENIED while this
// server registers again) is retried before it is dropped. An unreachable
// scheduler is waited for without limit: a dropped report would leave its
// step or lease unapplied in the ledger for good.
constexpr absl::Duration kGiveUpAfter = absl::Seconds(30);

bool Unreachable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsCancelled(s);
}

// Errors that retrying cannot cure.
bool Final(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) || absl::IsInvalidArgument(s) ||
         absl::IsUnimplemented(s);
}

}  // namespace

LedgerReporter::LedgerReporter(SchedulerClient* scheduler, int slot)
    : scheduler_(scheduler), slot_(slot), thread_([this] { Loop(); }) {}

LedgerReporter::~LedgerReporter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void LedgerReporter::Add(v1::AppliedReport report) {
  report.set_slot(slot_);
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(report));
}

bool LedgerReporter::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](LedgerReporter* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
            return r->queue_.empty() && !r->sending_;
          },
          this),
      timeout);
}

void LedgerReporter::Loop() {
  for (;;) {
    std::vector<v1::AppliedReport> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](LedgerReporter* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
            return r->stop_ || !r->queue_.empty();
          },
          this));
      if (stop_) return;
      while (!queue_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      sending_ = true;
    }
    const absl::Time give_up = absl::Now() + kGiveUpAfter;
    absl::Duration backoff = kMinBackoff;
    for (;;) {
      absl::StatusOr<v1::ReportAppliedResponse> r =
          scheduler_->ReportApplied(batch);
      if (r.ok()) break;
      if (Final(r.status()) ||
          (!Unreachable(r.status()) && absl::Now() > give_up)) {
        // FAILED_PRECONDITION before any worker leased work: a job driven
        // without the ledger (tests, benches); nothing to record.
        const auto level = absl::IsFailedPrecondition(r.status())
                               ? spdlog::level::debug
                               : spdlog::level::err;
        spdlog::log(level, "strata server: {} ledger report(s) dropped: {}",
                    batch.size(), r.status().ToString());
        break;
      }
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), backoff)) return;
      backoff = std::min(2 * backoff, kMaxBackoff);
    }
    absl::MutexLock lock(&mu_);
    sending_ = false;
  }
}

}  // namespace strata
