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

#include "absl/status/statusor.h"
#include "strata/v1/ps.grpc.pb.h"
#include "transport/ucx_node.h"

namespace strata {

// Thread-safe.
class BulkLink {
 public:
  // Attaches a session at the server behind `stub` (as member `member_id`
  // of view `epoch`) and connects to its worker. AttachBulk's errors:
  // FAILED_PRECONDITION where the server offers no bulk plane.
  static absl::StatusOr<std::shared_ptr<BulkLink>> Attach(
      v1::ParameterServer::Stub* stub, std::shared_ptr<UcxNode> node,
      uint64_t member_id, uint64_t epoch);
  ~BulkLink();  // closes the endpoint

  // Sends a push's payload; `*ref` names it for the request.
  std::unique_ptr<UcxTransfer> Send(const void* data, size_t bytes,
                                    v1::BulkRef* ref);
  // Posts the receive of a pull's weights (exactly `bytes`); `*ref` names
  // it for the request.
  std::unique_ptr<UcxTransfer> Receive(void* data, size_t bytes,
                                       v1::BulkRef* ref);
  // Ends the link: its sends under way end, and later ones fail.
  void Break() { endpoint_->Close(); }
  bool broken() const { return endpoint_->failed(); }
  uint32_t session() const { return session_; }

 private:
  BulkLink(std::shared_ptr<UcxNode> node, std::shared_ptr<UcxEndpoint> endpoint,
           uint32_t session)
      : node_(std::move(node)),
        endpoint_(std::move(endpoint)),
        session_(session) {}
  const std::shared_ptr<UcxNode> node_;
  const std::shared_ptr<UcxEndpoint> endpoint_;
  const uint32_t session_;
  std::atomic<uint32_t> next_{0};
};

}  // namespace strata

#endif  // STRATA_CLIENT_BULK_LINK_H_
