// A client's bulk data plane to one server (AttachBulk in ps.proto): an
// endpoint of the client's UCX worker to the server's, and the session
// that names the link in requests. A push sends its gradient tagged with
// the session and a number of its own, then names the tag in its request;
// a pull posts a receive of the weights, then names its tag.
//
// A transfer that fails, or that is still under way when its call ended
// without an answer, breaks the link: its endpoint closes (so UCX reads or
// writes none of the caller's buffers after that), the ops retry, and the
// client attaches a new link.
#ifndef STRATA_CLIENT_BULK_LINK_H_
#define STRATA_CLIENT_BULK_LINK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "strata/v1/ps.grpc.pb.h"
#include "transport/bulk_cipher.h"
#include "transport/ucx_node.h"

namespace strata {

// Thread-safe.
class BulkLink {
 public:
  // Attaches a session at the server behind `stub` (as member `member_id`
  // of view `epoch`) and connects to its worker. AttachBulk's errors:
  // FAILED_PRECONDITION where the server offers no bulk plane, or, with
  // `sealed`, where it gives no key (its payloads would go in plaintext).
  static absl::StatusOr<std::shared_ptr<BulkLink>> Attach(
      v1::ParameterServer::Stub* stub, std::shared_ptr<UcxNode> node,
      uint64_t member_id, uint64_t epoch, bool sealed);
  ~BulkLink();  // closes the endpoint

  // Sends a push's payload; `*ref` names it for the request. Where the
  // session has a key the payload is sealed into `*staging` first, which
  // must then stay until the transfer is done.
  absl::StatusOr<std::unique_ptr<UcxTransfer>> Send(const void* data,
                                                    size_t bytes,
                                                    std::string* staging,
                                                    v1::BulkRef* ref);
  // Posts the receive of a pull's weights (`bytes` of them); `*ref` names
  // it for the request. Where the session has a key they arrive sealed in
  // `*staging`, and Opened puts them at `data`.
  std::unique_ptr<UcxTransfer> Receive(void* data, size_t bytes,
                                       std::string* staging, v1::BulkRef* ref);
  // After a Receive's transfer ended well: opens the sealed weights in
  // `staging` into `data` (PERMISSION_DENIED if they do not authenticate);
  // OK at once where the session has no key.
  absl::Status Opened(const v1::BulkRef& ref, const std::string& staging,
                      void* data) const;
  // Ends the link: its sends under way end, and later ones fail.
  void Break() { endpoint_->Close(); }
  bool broken() const { return endpoint_->failed(); }
  uint32_t session() const { return session_; }

 private:
  BulkLink(std::shared_ptr<UcxNode> node, std::shared_ptr<UcxEndpoint> endpoint,
           uint32_t session, std::optional<BulkCipher> cipher)
      : node_(std::move(node)),
        endpoint_(std::move(endpoint)),
        session_(session),
        cipher_(std::move(cipher)) {}
  const std::shared_ptr<UcxNode> node_;
  const std::shared_ptr<UcxEndpoint> endpoint_;
  const uint32_t session_;
  const std::optional<BulkCipher> cipher_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace strata

#endif  // STRATA_CLIENT_BULK_LINK_H_
