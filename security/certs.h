// A certificate authority and per-role certificates for a test or small
// cluster, made with OpenSSL's library: ECDSA P-256 keys, X.509 v3.
//
// Each role's certificate names its role twice: as its subject's common
// name ("worker") and as the DNS name "<role>.strata" (security/tls.h
// RoleHostName). Servers read the role from the common name to authorize
// each RPC; clients check the peer's DNS name to know they reached the
// role they dialled. The host names and addresses a cluster dials are
// added as further subject alternative names (`hosts`), so the files also
// work with tools that check host names.
#ifndef STRATA_SECURITY_CERTS_H_
#define STRATA_SECURITY_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata {

// A PEM certificate and its PEM private key.
struct CertAndKey {
  std::string cert_pem;
  std::string key_pem;
};

struct CertSpec {
  std::string common_name;
  // Subject alternative names: an entry that parses as an IPv4 or IPv6
  // address becomes an IP name, any other a DNS name.
  std::vector<std::string> alt_names;
  absl::Time not_before = absl::Now() - absl::Minutes(5);  // clock skew
  absl::Time not_after = absl::Now() + absl::Hours(24 * 365);
};

// A self-signed CA certificate (basicConstraints CA:TRUE, keyCertSign).
absl::StatusOr<CertAndKey> MakeCa(const CertSpec& spec);

// A certificate for `spec` signed by `ca`, usable by a TLS server and a
// TLS client (extendedKeyUsage serverAuth, clientAuth).
absl::StatusOr<CertAndKey> IssueCert(const CertAndKey& ca,
                                     const CertSpec& spec);

struct ClusterCertsOptions {
  std::string out_dir;  // created if missing
  // Extra subject alternative names in every role's certificate.
  std::vector<std::string> hosts = {"localhost", "127.0.0.1", "::1"};
  absl::Duration valid_for = absl::Hours(24 * 365);
  // Refuse to replace files already in out_dir unless set.
  bool overwrite = false;
};

// Writes ca.pem and ca.key, and <role>.pem and <role>.key for each of
// scheduler, server, worker and client (status tools); keys are mode 0600.
// Errors: out_dir not writable, or files present without `overwrite`.
absl::Status WriteClusterCerts(const ClusterCertsOptions& options);

}  // namespace strata

#endif  // STRATA_SECURITY_CERTS_H_
