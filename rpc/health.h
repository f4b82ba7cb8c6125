// gRPC health (grpc.health.v1) for Strata's roles: every gRPC server a role
// runs answers Check and Watch through gRPC's built-in health service,
// NOT_SERVING until the role is ready and after it starts to shut down.
// `strata health` and `strata status` ask it (and Kubernetes' grpc probes
// where there is no TLS: they present no client certificate).
#ifndef STRATA_RPC_HEALTH_H_
#define STRATA_RPC_HEALTH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "security/tls.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace strata {

// Makes every grpc::Server built after this call serve the health service.
// Idempotent; call before building a server.
void EnableHealthService();

// Sets the whole server's status ("" service): SERVING or NOT_SERVING.
// REQUIRES: `server` was built after EnableHealthService().
void SetServing(grpc::Server* server, bool serving);

// A gRPC server that serves only health, for a role that serves no other
// gRPC (a worker). gRPC's built-in health service needs another service
// beside it; this one answers Check and Watch itself.
class HealthServer {
 public:
  // Listens on `listen` (host:port, port 0: any free one) with
  // `security`'s credentials, NOT_SERVING until SetServing. UNAVAILABLE if
  // it cannot bind.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(
      const std::string& listen,
      const Security& security = *Security::Plaintext());
  ~HealthServer();  // stops serving; Watch streams end
  void SetServing(bool serving);
  int port() const { return port_; }

 private:
  class Service;
  HealthServer();
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Asks the server at `address` (host:port) whether it is SERVING, dialling
// it with `security` as a member of role `peer` (security/tls.h). Returns
// true/false for SERVING/anything else; a Status (UNAVAILABLE,
// DEADLINE_EXCEEDED, UNIMPLEMENTED where no health service runs) naming
// the address when it does not answer within `timeout`.
absl::StatusOr<bool> CheckHealth(
    const std::string& address, absl::Duration timeout = absl::Seconds(5),
    const Security& security = *Security::Plaintext(),
    Role peer = Role::kServer);

}  // namespace strata

#endif  // STRATA_RPC_HEALTH_H_
