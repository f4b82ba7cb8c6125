// "host:port" (or "[v6-host]:port"): the address a peer dials or a server
// listens on, checked before gRPC is given it (a malformed one would make
// gRPC retry name resolution until the connect deadline).
#ifndef STRATA_COMMON_HOST_PORT_H_
#define STRATA_COMMON_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

struct HostPort {
  std::string host;  // without brackets
  int port = 0;
};

// INVALID_ARGUMENT, saying what is wrong, unless `address` is host:port
// with a non-empty host (no spaces; an IPv6 one in brackets) and a port in
// [0, 65535] (0: any free port, for a listening address only).
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

}  // namespace strata

#endif  // STRATA_COMMON_HOST_PORT_H_
