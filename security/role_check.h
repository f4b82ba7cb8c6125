// Loading a member's TLS files for a given role: the one check every
// entry point (the CLI's flags, the Python client's keywords) makes.
#ifndef STRATA_SECURITY_ROLE_CHECK_H_
#define STRATA_SECURITY_ROLE_CHECK_H_

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "security/tls.h"

namespace strata {

// Security::Load(files), then, with TLS and a `role`, that the certificate
// is that role's: INVALID_ARGUMENT naming the file as `cert_name` calls it
// (e.g. "--tls_cert" or "tls_cert") otherwise. Load's errors as they are.
absl::StatusOr<std::shared_ptr<const Security>> LoadForRole(
    const TlsFiles& files, std::optional<Role> role,
    absl::string_view cert_name);

}  // namespace strata

#endif  // STRATA_SECURITY_ROLE_CHECK_H_
