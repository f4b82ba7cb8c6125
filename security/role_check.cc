#include "security/role_check.h"

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<std::shared_ptr<const Security>> LoadForRole(
    const TlsFiles& files, std::optional<Role> role,
    absl::string_view cert_name) {
  absl::StatusOr<std::shared_ptr<const Security>> security =
      Security::Load(files);
  if (!security.ok()) return security.status();
  if (role && (*security)->tls() && (*security)->role() != role) {
    return absl::InvalidArgumentError(absl::StrCat(
        cert_name, " ", files.cert, " is a ", RoleName(*(*security)->role()),
        "'s certificate; a ", RoleName(*role), " needs its own (",
        RoleName(*role), ".pem from `strata certs`)"));
  }
  return security;
}

}  // namespace strata
