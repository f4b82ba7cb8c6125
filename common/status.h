// Status helpers shared by every part: early-return macros and the one place
// where absl::Status and grpc::Status are converted (only gRPC handlers and
// stubs call the converters).
#ifndef STRATA_COMMON_STATUS_H_
#define STRATA_COMMON_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STRATA_CONCAT_INNER_(a, b) a##b
#define STRATA_CONCAT_(a, b) STRATA_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define STRATA_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status strata_status_ = (expr);          \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)

// In a gRPC handler: returns `expr` (an absl::Status) as a grpc::Status if
// it is not OK.
#define STRATA_RETURN_GRPC_IF_ERROR(expr)                          \
  do {                                                             \
    ::absl::Status strata_status_ = (expr);                        \
    if (!strata_status_.ok()) return ToGrpcStatus(strata_status_); \
  } while (0)

// `lhs = value of expr` (an absl::StatusOr<T>), or returns its error.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL_(STRATA_CONCAT_(strata_or_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

namespace strata {

// Converts for the gRPC edge. Codes map one to one (they share numbering).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// True for codes a caller may retry as the same call (UNAVAILABLE).
bool IsRetryable(const absl::Status& status);

}  // namespace strata

#endif  // STRATA_COMMON_STATUS_H_
