#include "common/byte_size.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < t.size() &&
         (absl::ascii_isdigit(t[digits]) || t[digits] == '.'))
    ++digits;
  double number = 0;
  const std::string unit =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(t.substr(digits)));
  static constexpr std::pair<const char*, double> kUnits[] = {
      {"", 1},          {"b", 1},         {"kib", 1024.0},
      {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1099511627776.0},
      {"kb", 1e3},      {"mb", 1e6},      {"gb", 1e9},
      {"tb", 1e12},     {"k", 1024.0},    {"m", 1 << 20},
      {"g", 1 << 30}};
  double scale = 0;
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) scale = factor;
  }
  if (digits == 0 || !absl::SimpleAtod(t.substr(0, digits), &number) ||
      scale == 0 || !(number * scale < 1.8e19)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text,
                     "' is not a byte size (a number with an optional unit: "
                     "B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"));
  }
  return static_cast<uint64_t>(number * scale);
}

}  // namespace strata
