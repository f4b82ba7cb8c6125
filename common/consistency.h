// The job's consistency setting: bsp | ssp:<s> | asp.
#ifndef STRATA_COMMON_CONSISTENCY_H_
#define STRATA_COMMON_CONSISTENCY_H_

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

// Parses "bsp", "asp" or "ssp:<s>" with 0 <= s <= kMaxStaleness.
// INVALID_ARGUMENT with the accepted forms otherwise.
absl::StatusOr<Consistency> ParseConsistency(absl::string_view text);

// INVALID_ARGUMENT for a setting ParseConsistency would not give (an SSP
// staleness outside [0, kMaxStaleness]).
absl::Status ValidateConsistency(const Consistency& c);

}  // namespace strata

#endif  // STRATA_COMMON_CONSISTENCY_H_
