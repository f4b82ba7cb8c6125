// `--wire`: how push and pull payloads travel between hosts. gRPC carries
// every request and answer either way; on one host, shared memory comes
// first (client/shm_link.h).
#ifndef STRATA_TRANSPORT_WIRE_KIND_H_
#define STRATA_TRANSPORT_WIRE_KIND_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace strata {

enum class WireKind {
  kGrpc,  // payloads in gRPC messages
  kUcx,   // on the bulk plane (transport/ucx_node.h), or an error
  kAuto,  // on the bulk plane where both ends have it, else in messages
};

inline absl::StatusOr<WireKind> ParseWireKind(absl::string_view text) {
  if (text == "grpc") return WireKind::kGrpc;
  if (text == "ucx") return WireKind::kUcx;
  if (text == "auto") return WireKind::kAuto;
  return absl::InvalidArgumentError(
      absl::StrCat("--wire ", text, ": one of grpc, ucx, auto"));
}

inline const char* WireKindName(WireKind kind) {
  switch (kind) {
    case WireKind::kGrpc:
      return "grpc";
    case WireKind::kUcx:
      return "ucx";
    case WireKind::kAuto:
      return "auto";
  }
  return "?";
}

}  // namespace strata

#endif  // STRATA_TRANSPORT_WIRE_KIND_H_
