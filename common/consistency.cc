#include "common/consistency.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata {

std::string Consistency::ToString() const {
  switch (mode) {
    case kBsp:
      return "bsp";
    case kAsp:
      return "asp";
    case kSsp:
      return absl::StrCat("ssp:", staleness);
  }
  return "?";
}

absl::StatusOr<Consistency> ParseConsistency(absl::string_view text) {
  Consistency c;
  if (text == "bsp") return c;
  if (text == "asp") {
    c.mode = Consistency::kAsp;
    return c;
  }
  if (absl::StartsWith(text, "ssp:")) {
    const absl::string_view digits = text.substr(4);
    int s = -1;
    // Digits only: SimpleAtoi alone would also take a sign and spaces.
    if (!digits.empty() && digits.size() <= 7 &&
        std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) &&
        absl::SimpleAtoi(digits, &s) && s <= kMaxStaleness) {
      c.mode = Consistency::kSsp;
      c.staleness = s;
      return c;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "bad consistency '", text.substr(0, 32), text.size() > 32 ? "..." : "",
      "': expected bsp, asp or ssp:<s> with 0 <= s <= ", kMaxStaleness));
}

namespace {

int64_t Drift(const Consistency& c) {
  switch (c.mode) {
    case Consistency::kBsp:
      return -1;
    case Consistency::kSsp:
      return c.staleness;
    case Consistency::kAsp:
      break;
  }
  return int64_t{kMaxStaleness} + 1;
}

}  // namespace

bool Looser(const Consistency& b, const Consistency& a) {
  return Drift(b) > Drift(a);
}

std::string AutoConsistency::ToString() const {
  return absl::StrCat("auto:", max_staleness, allow_asp ? "" : ":ssp");
}

absl::StatusOr<std::optional<AutoConsistency>> ParseAutoConsistency(
    absl::string_view text) {
  if (!absl::StartsWith(text, "auto")) return std::nullopt;
  AutoConsistency a;
  if (text == "auto") return a;
  absl::string_view digits =
      absl::StartsWith(text, "auto:") ? text.substr(5) : absl::string_view();
  // The loosest mode, after the bound.
  if (absl::EndsWith(digits, ":ssp")) {
    a.allow_asp = false;
    digits.remove_suffix(4);
  } else if (absl::EndsWith(digits, ":asp")) {
    digits.remove_suffix(4);
  }
  int s = -1;
  if (!digits.empty() && digits.size() <= 7 &&
      std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) &&
      absl::SimpleAtoi(digits, &s) && s >= 1 && s <= kMaxStaleness) {
    a.max_staleness = s;
    return a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "bad consistency '", text.substr(0, 32), text.size() > 32 ? "..." : "",
      "': expected auto, auto:<max_staleness> or auto:<max_staleness>:ssp "
      "(SSP the loosest mode it may switch to) with 1 <= max_staleness <= ",
      kMaxStaleness));
}

absl::Status ValidateConsistency(const Consistency& c) {
  if (c.mode != Consistency::kSsp ||
      (c.staleness >= 0 && c.staleness <= kMaxStaleness)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "ssp staleness ", c.staleness, " is not in [0, ", kMaxStaleness, "]"));
}

}  // namespace strata
