// The job's consistency setting: bsp | ssp:<s> | asp.
#ifndef STRATA_COMMON_CONSISTENCY_H_
#define STRATA_COMMON_CONSISTENCY_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

struct Consistency {
  enum Mode { kBsp, kSsp, kAsp };
  Mode mode = kBsp;
  int staleness =
      0;  // ssp only: a worker at clock c waits for min clock >= c - s
  std::string ToString() const;
};

inline constexpr int kMaxStaleness = 1000000;

// In the ledger's OUT_OF_RANGE answer to a lease of a step before the one
// an --consistency auto job went back to BSP at: an SSP/ASP worker's
// clock, which is then no sign that every sample is applied
// (cluster/worker_session.h BackInBsp).
inline constexpr char kBeforeBackToBsp[] =
    "is before the step the job went back to bsp at";

// Parses "bsp", "asp" or "ssp:<s>" with 0 <= s <= kMaxStaleness.
// INVALID_ARGUMENT with the accepted forms otherwise.
absl::StatusOr<Consistency> ParseConsistency(absl::string_view text);

// INVALID_ARGUMENT for a setting ParseConsistency would not give (an SSP
// staleness outside [0, kMaxStaleness]).
absl::Status ValidateConsistency(const Consistency& c);

// Whether `b` lets workers drift further apart than `a`: bsp, then
// ssp:0, ssp:1, ..., then asp.
bool Looser(const Consistency& b, const Consistency& a);

// --consistency auto[:<max_staleness>[:ssp]]: the scheduler starts the
// job in BSP and switches it live between BSP, SSP(s) and ASP by its rule
// (scheduler/consistency_switcher.h), never past `max_staleness` (SSP's
// bound, and the most staleness ASP may bring), and never to ASP when
// the user pinned SSP as the loosest mode (a model that does not train
// under HOGWILD!-style updates).
struct AutoConsistency {
  static constexpr int kDefaultMaxStaleness = 4;
  int max_staleness = kDefaultMaxStaleness;
  bool allow_asp = true;         // false: ":ssp", SSP is the loosest mode
  std::string ToString() const;  // auto:<max_staleness>[:ssp]
};

// "auto", "auto:<s>" or "auto:<s>:ssp" with 1 <= s <= kMaxStaleness
// ("auto:<s>:asp" is "auto:<s>"); nullopt for a text not starting with
// "auto" (a fixed setting: ParseConsistency); INVALID_ARGUMENT for a
// malformed one.
absl::StatusOr<std::optional<AutoConsistency>> ParseAutoConsistency(
    absl::string_view text);

}  // namespace strata

#endif  // STRATA_COMMON_CONSISTENCY_H_
