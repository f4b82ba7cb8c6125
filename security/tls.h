// Who may talk to whom: mutual TLS on every channel, and the caller's role
// (from its certificate) checked by each RPC handler.
//
// A process holds one Security: plaintext (strata local on loopback, tests)
// or TLS from three PEM files (--tls_cert --tls_key --tls_ca). Under TLS:
//  - servers ask every client for a certificate signed by the CA and refuse
//    the handshake without one (a wrong CA, an expired certificate);
//  - the caller's role is its certificate's common name; Authorize refuses
//    a call whose role is not one the method allows (PERMISSION_DENIED);
//  - clients check that the peer's certificate names the role they dialled
//    (the DNS name "<role>.strata"), so a worker's certificate cannot pose
//    as a server or the scheduler. Host names are not checked: members
//    dial addresses (pod IPs, compose names) that the CA cannot know.
// Certificates are read once at start; rotating them means restarting the
// process with new files.
#ifndef STRATA_SECURITY_TLS_H_
#define STRATA_SECURITY_TLS_H_

#include <grpcpp/grpcpp.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

// What a certificate lets its holder be. kClient is a tool: `strata
// status`, `strata health`, `strata ledger`.
enum class Role { kScheduler, kServer, kWorker, kClient };
inline constexpr Role kAllRoles[] = {Role::kScheduler, Role::kServer,
                                     Role::kWorker, Role::kClient};

absl::string_view RoleName(Role role);  // "scheduler", "server", ...
std::optional<Role> ParseRole(absl::string_view name);
// The DNS name a role's certificate carries: "<role>.strata".
std::string RoleHostName(Role role);

struct TlsFiles {
  std::string cert;  // this process's certificate (PEM)
  std::string key;   // its private key (PEM)
  std::string ca;    // the CA that signs every member's certificate (PEM)
  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

class Security {
 public:
  // No TLS: every caller may call every method. For loopback only
  // (CheckListen enforces that for listeners).
  static std::shared_ptr<const Security> Plaintext();

  // Reads and checks the three files: each readable PEM, the key matches
  // the certificate, the certificate verifies against the CA and is valid
  // now, and its common name is a role. Errors name the file and the
  // reason. `files` must have all three or none (then Plaintext()).
  static absl::StatusOr<std::shared_ptr<const Security>> Load(
      const TlsFiles& files);

  bool tls() const { return tls_; }
  // The role this process's certificate names; nullopt for plaintext.
  std::optional<Role> role() const { return role_; }

  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;

  // A channel to `address` whose peer must hold a `peer` certificate.
  std::shared_ptr<grpc::Channel> Dial(
      const std::string& address, Role peer,
      grpc::ChannelArguments args = grpc::ChannelArguments()) const;

  // The role of the peer of `ctx`: its certificate's common name.
  // nullopt for plaintext (every caller is trusted). UNAUTHENTICATED when
  // the peer presented no certificate, PERMISSION_DENIED when its common
  // name is no role.
  absl::StatusOr<std::optional<Role>> CallerRole(
      const grpc::ServerContextBase& ctx) const;

  // OK when the caller's role is in `allowed` (always under plaintext);
  // else PERMISSION_DENIED naming the role and `method`.
  absl::Status Authorize(const grpc::ServerContextBase& ctx,
                         absl::string_view method,
                         std::initializer_list<Role> allowed) const;

 private:
  Security() = default;

  bool tls_ = false;
  std::optional<Role> role_;
  std::string cert_pem_, key_pem_, ca_pem_;
};

// OK when `security` is TLS, when `address`'s host is loopback (127.0.0.0/8,
// ::1, localhost), or when `insecure` is set; otherwise FAILED_PRECONDITION
// saying how to give certificates. `what` names the listener in the error.
absl::Status CheckListen(absl::string_view what, const std::string& address,
                         const Security& security, bool insecure);

}  // namespace strata

#endif  // STRATA_SECURITY_TLS_H_
