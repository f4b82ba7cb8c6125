// The client's compressed pushes and pulls (PsClientOptions::
// push_compress, pull_compress; docs/ARCHITECTURE.md "Compressed
// pushes"): which ops go compressed, a push's encoding with its error
// carried (client/error_feedback.h) and where it travels, and a pull's
// delta applied to the chunk's copy (client/pulled_copies.h). The rest of
// PsClient::Impl is in ps_client_impl.cc.
#include <algorithm>
#include <cstring>
#include <string>

#include "client/ps_client_impl.h"
#include "common/wire.h"

namespace strata {

using ps_client_internal::OpPtr;
using ps_client_internal::OpState;

bool PsClient::Impl::Compressed(const OpState& op) const {
  const bool push = op.kind == OpState::kPush;
  const v1::DType how = push ? options_.push_compress : options_.pull_compress;
  // A pull one step early, for the whole weights: the copies
  // start there, and the first compressed step's pull is a delta.
  const int64_t from =
      push ? options_.compress_from_step
           : std::max<int64_t>(0, options_.compress_from_step - 1);
  return how != v1::DTYPE_UNSPECIFIED && !op.stamp.dtype && op.step >= from;
}

grpc::ByteBuffer PsClient::Impl::CompressedPush(const OpPtr& op, Stubs* stubs,
                                                v1::PushRequest& header) {
  const ChunkInfo& chunk = plan_.chunks[op->chunk];
  if (!op->encoded) {
    // Once per push: a retry sends the same bytes (their error is carried).
    compress_errors_.Encode(op->chunk, op->grad,
                            static_cast<int64_t>(chunk.numel), &op->bf16);
    op->encoded = true;
  }
  const size_t bytes = op->bf16.size();
  header.set_dtype(compress_errors_.dtype());
  if (TakeShmSlot(op, stubs, bytes)) {
    std::memcpy(op->shm_slot.data, op->bf16.data(), bytes);
    v1::ShmRef place = op->shm_slot.ref;
    place.set_size(bytes);
    *header.mutable_shm() = place;
    grpc::Slice slice(header.SerializeAsString());
    return grpc::ByteBuffer(&slice, 1);
  }
  if (v1::BulkRef ref; header.dtype() == v1::DTYPE_ONEBIT &&
                       TakeBulk(op, stubs, op->bf16.data(), bytes, &ref)) {
    *header.mutable_bulk() = ref;
    grpc::Slice slice(header.SerializeAsString());
    return grpc::ByteBuffer(&slice, 1);
  }
  return SerializeWithPayload(header, v1::PushRequest::kDataFieldNumber,
                              op->bf16.data(), bytes);
}

void PsClient::Impl::CompressedPullFields(const OpState& op,
                                          v1::PullRequest* req) {
  // Base 0 asks for the whole weights: so before compress_from_step.
  if (op.step >= options_.compress_from_step) {
    req->set_delta_base(pulled_.Base(op.chunk));
  }
  req->set_topk_ratio(options_.topk_ratio);
}

absl::Status PsClient::Impl::ReadCompressedPull(const OpState& op,
                                                const v1::PullResponse& resp,
                                                const PayloadMessage& message) {
  std::string payload(message.payload_size(), '\0');
  message.CopyPayload(payload.data());
  return pulled_.Apply(op.chunk, plan_.chunks[op.chunk].numel, op.pull_dtype,
                       resp, payload, op.dst);
}

}  // namespace strata
