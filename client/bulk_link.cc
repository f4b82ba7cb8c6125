#include "client/bulk_link.h"

#include <grpcpp/grpcpp.h>

#include "common/status.h"

namespace strata {

absl::StatusOr<std::shared_ptr<BulkLink>> BulkLink::Attach(
    v1::ParameterServer::Stub* stub, std::shared_ptr<UcxNode> node,
    uint64_t member_id, uint64_t epoch, bool sealed) {
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
  std::optional<BulkCipher> cipher;
  if (!resp.key().empty()) {
    STRATA_ASSIGN_OR_RETURN(cipher, BulkCipher::FromKey(resp.key()));
  } else if (sealed) {
    return absl::FailedPreconditionError(
        "the server's bulk plane does not encrypt (it runs with "
        "--bulk_insecure); this worker needs --bulk_insecure too");
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<UcxEndpoint> endpoint,
                          node->Connect(resp.address()));
  return std::shared_ptr<BulkLink>(new BulkLink(
      std::move(node), std::move(endpoint), resp.session(), std::move(cipher)));
}

BulkLink::~BulkLink() { endpoint_->Close(); }

absl::StatusOr<std::unique_ptr<UcxTransfer>> BulkLink::Send(
    const void* data, size_t bytes, std::string* staging, v1::BulkRef* ref) {
  // 64 bits never wrap: past 2^32 - 1 every caller is refused, and no tag
  // (nor nonce) repeats.
  const uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
  if (n > UINT32_MAX) {
    Break();  // a new session for the next ones
    return absl::UnavailableError("the bulk session ran out of tags");
  }
  // The server receives it by tag: the session's in the high half.
  const uint64_t tag = (uint64_t{session_} << 32) | n;
  size_t on_wire = bytes;
  if (cipher_) {
    on_wire = bytes + BulkCipher::kTagBytes;
    staging->resize(on_wire);
    STRATA_RETURN_IF_ERROR(cipher_->Seal(BulkCipher::kToServer, tag, data,
                                         bytes, staging->data()));
    data = staging->data();
  }
  ref->set_session(session_);
  ref->set_tag(tag);
  ref->set_size(on_wire);
  return endpoint_->Send(data, on_wire, tag);
}

std::unique_ptr<UcxTransfer> BulkLink::Receive(void* data, size_t bytes,
                                               std::string* staging,
                                               v1::BulkRef* ref) {
  // Matched on this process's own worker, whose receives every link
  // shares: one counter for the process.
  static std::atomic<uint64_t> next_receive{1};
  const uint64_t tag = next_receive.fetch_add(1, std::memory_order_relaxed);
  size_t on_wire = bytes;
  if (cipher_) {
    on_wire = bytes + BulkCipher::kTagBytes;
    staging->resize(on_wire);
    data = staging->data();
  }
  ref->set_session(session_);
  ref->set_tag(tag);
  ref->set_size(on_wire);
  return node_->Receive(data, on_wire, tag);
}

absl::Status BulkLink::Opened(const v1::BulkRef& ref,
                              const std::string& staging, void* data) const {
  if (!cipher_) return absl::OkStatus();
  return cipher_->Open(BulkCipher::kToWorker, ref.tag(), staging.data(),
                       staging.size(), data);
}

}  // namespace strata
