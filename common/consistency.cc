#include "common/consistency.h"

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
    int s = -1;
    if (absl::SimpleAtoi(text.substr(4), &s) && s >= 0 && s <= 1000000) {
      c.mode = Consistency::kSsp;
      c.staleness = s;
      return c;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad consistency '", text,
                   "': expected bsp, asp or ssp:<s> with s >= 0"));
}

}  // namespace strata
