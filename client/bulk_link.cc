#include "client/bulk_link.h"

#include <grpcpp/grpcpp.h>

#include "common/status.h"

namespace strata {

absl::StatusOr<std::shared_ptr<BulkLink>> BulkLink::Attach(
    v1::ParameterServer::Stub* stub, std::shared_ptr<UcxNode> node,
    uint64_t member_id, uint64_t epoch) {
  v1::AttachBulkRequest req;
  req.set_member_id(member_id);
  req.set_epoch(epoch);
  req.set_address(node->address());
  v1::AttachBulkResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  STRATA_RETURN_IF_ERROR(FromGrpcStatus(stub->AttachBulk(&ctx, req, &resp)));
  if (resp.session() == 0 || resp.address().empty()) {
    return absl::FailedPreconditionError(
        "AttachBulk answered without a session or an address");
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<UcxEndpoint> endpoint,
                          node->Connect(resp.address()));
  return std::shared_ptr<BulkLink>(
      new BulkLink(std::move(node), std::move(endpoint), resp.session()));
}

BulkLink::~BulkLink() { endpoint_->Close(); }

std::unique_ptr<UcxTransfer> BulkLink::Send(const void* data, size_t bytes,
                                            v1::BulkRef* ref) {
  // The server receives it by tag: the session's in the high half.
  const uint64_t tag = (uint64_t{session_} << 32) |
                       next_.fetch_add(1, std::memory_order_relaxed);
  ref->set_session(session_);
  ref->set_tag(tag);
  ref->set_size(bytes);
  return endpoint_->Send(data, bytes, tag);
}

std::unique_ptr<UcxTransfer> BulkLink::Receive(void* data, size_t bytes,
                                               v1::BulkRef* ref) {
  // Matched on this process's own worker, whose receives every link
  // shares: one counter for the process.
  static std::atomic<uint64_t> next_receive{1};
  const uint64_t tag = next_receive.fetch_add(1, std::memory_order_relaxed);
  ref->set_session(session_);
  ref->set_tag(tag);
  ref->set_size(bytes);
  return node_->Receive(data, bytes, tag);
}

}  // namespace strata
