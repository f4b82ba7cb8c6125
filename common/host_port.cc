#include "common/host_port.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

absl::Status Bad(absl::string_view address, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "address '", address.substr(0, 64), address.size() > 64 ? "...' " : "' ",
      why, " (want host:port, e.g. 127.0.0.1:7070 or [::1]:7070)"));
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  HostPort out;
  absl::string_view port;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return Bad(address, "has no ']'");
    out.host = std::string(address.substr(1, close - 1));
    if (address.substr(close + 1, 1) != ":") {
      return Bad(address, "has no ':port' after its ']'");
    }
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return Bad(address, "has no port");
    out.host = std::string(address.substr(0, colon));
    if (absl::StrContains(out.host, ':')) {
      return Bad(address, "has an IPv6 host outside brackets");
    }
    port = address.substr(colon + 1);
  }
  if (out.host.empty()) return Bad(address, "has no host");
  for (char c : out.host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) ||
        absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return Bad(address, "has a space or control character in its host");
    }
  }
  uint32_t p = 0;
  if (port.empty() ||
      !absl::ascii_isdigit(static_cast<unsigned char>(port[0])) ||
      !absl::SimpleAtoi(port, &p) || p > 65535) {
    return Bad(address, "has no port in [0, 65535]");
  }
  out.port = static_cast<int>(p);
  return out;
}

}  // namespace strata
