// The rules of a PushBatch or PullBatch call (ps.proto): its requests run
// one after another, each answered apart; the pulls' gate waits share one
// max_wait from the batch's start; after an UNAVAILABLE, or once the
// answers hold kMaxBatchAnswerBytes, the rest are answered UNAVAILABLE
// untried. The service (ps_service.cc) supplies how one request is
// handled. Private to server/.
#ifndef STRATA_SERVER_REQUEST_BATCH_H_
#define STRATA_SERVER_REQUEST_BATCH_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata {

inline constexpr int kMaxBatchRequests = 4096;
inline constexpr size_t kMaxBatchAnswerBytes = 64 << 20;

// Runs the requests of the BatchRequest in `request` through
// one(request, answer, batch_start) and writes the BatchResponse to
// *response; answered(status, time taken) is told each request's end,
// untried ones included. The number of requests; INVALID_ARGUMENT, with
// none run, for a batch that does not parse, is empty or holds more than
// kMaxBatchRequests.
absl::StatusOr<int> RunBatch(
    const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
    absl::FunctionRef<absl::Status(const grpc::ByteBuffer&, grpc::ByteBuffer*,
                                   absl::Time)>
        one,
    absl::FunctionRef<void(const absl::Status&, absl::Duration)> answered);

}  // namespace strata

#endif  // STRATA_SERVER_REQUEST_BATCH_H_
