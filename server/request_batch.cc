#include "server/request_batch.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shm_region.h"
#include "common/status.h"
#include "common/wire.h"
#include "strata/v1/ps.pb.h"

namespace strata {
namespace {

// Copies `buffer`'s bytes to *out; false if they could not be read.
bool Flatten(const grpc::ByteBuffer& buffer, std::string* out) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  out->clear();
  for (const grpc::Slice& s : slices)
    out->append(reinterpret_cast<const char*>(s.begin()), s.size());
  return true;
}

}  // namespace

absl::StatusOr<int> RunBatch(
    const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
    absl::FunctionRef<absl::Status(const grpc::ByteBuffer&, grpc::ByteBuffer*,
                                   absl::Time)>
        one,
    absl::FunctionRef<void(const absl::Status&, absl::Duration)> answered) {
  v1::BatchRequest batch;
  PayloadMessage parsed;
  STRATA_RETURN_IF_ERROR(parsed.Parse(request, /*field=*/0, &batch));
  if (batch.requests_size() == 0 || batch.requests_size() > kMaxBatchRequests) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch holds 1 to ", kMaxBatchRequests,
                     " requests, not ", batch.requests_size()));
  }
  v1::BatchResponse out;
  // The pulls' gate waits share one max_wait from here, so a batch ends
  // within about max_wait as one call does. After an UNAVAILABLE (the
  // server behind the caller's view or generation, or stopping: the same
  // for every request of the caller), or once the answers hold
  // kMaxBatchAnswerBytes, the rest are not tried: the caller retries them.
  const absl::Time batch_start = absl::Now();
  std::string untried;  // why the rest are not tried; empty: go on
  size_t answer_bytes = 0;
  for (const std::string& bytes : batch.requests()) {
    const absl::Time start = absl::Now();
    grpc::Slice slice(bytes);
    const grpc::ByteBuffer request_one(&slice, 1);
    grpc::ByteBuffer answer;
    absl::Status s =
        untried.empty()
            ? one(request_one, &answer, batch_start)
            : absl::UnavailableError(absl::StrCat("not tried: ", untried));
    if (untried.empty() && absl::IsUnavailable(s)) {
      untried = "an earlier request of its batch was UNAVAILABLE";
    }
    v1::BatchAnswer* a = out.add_answers();
    if (s.ok()) {
      if (!Flatten(answer, a->mutable_response())) {
        s = absl::InternalError("the answer's bytes could not be read");
      }
      answer_bytes += a->response().size();
      if (untried.empty() && answer_bytes >= kMaxBatchAnswerBytes) {
        untried = absl::StrCat("its batch's answers reached ",
                               kMaxBatchAnswerBytes >> 20, " MiB");
      }
    }
    answered(s, absl::Now() - start);
    a->set_code(static_cast<int>(s.code()));
    a->set_message(std::string(s.message()));
    a->set_shm_lost(IsNoSessionError(s));
  }
  grpc::Slice slice(out.SerializeAsString());
  *response = grpc::ByteBuffer(&slice, 1);
  return batch.requests_size();
}

}  // namespace strata
