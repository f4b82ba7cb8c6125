#include "security/certs.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "security/tls.h"

namespace strata {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION,
                               Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

// OpenSSL's queued errors as text, for a Status.
std::string OpensslError(const char* what) {
  std::string out = what;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, ": ", buf);
  }
  return out;
}

absl::StatusOr<std::string> ToPem(const std::function<int(BIO*)>& write) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) {
    return absl::InternalError(OpensslError("writing PEM"));
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid,
                          const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return absl::InvalidArgumentError(OpensslError(
        absl::StrCat("certificate extension '", value, "'").c_str()));
  }
  return absl::OkStatus();
}

std::string AltNames(const std::vector<std::string>& names) {
  std::vector<std::string> parts;
  for (const std::string& n : names) {
    unsigned char buf[16];
    const bool ip = inet_pton(AF_INET, n.c_str(), buf) == 1 ||
                    inet_pton(AF_INET6, n.c_str(), buf) == 1;
    parts.push_back(absl::StrCat(ip ? "IP:" : "DNS:", n));
  }
  return absl::StrJoin(parts, ",");
}

// A new certificate for `spec` with a fresh P-256 key, signed by
// `issuer_key` (its own key when self-signed).
absl::StatusOr<CertAndKey> Make(const CertSpec& spec, X509* issuer,
                                EVP_PKEY* issuer_key, bool ca) {
  if (spec.common_name.empty()) {
    return absl::InvalidArgumentError("certificate: empty common name");
  }
  if (spec.not_after <= spec.not_before) {
    return absl::InvalidArgumentError("certificate: not_after <= not_before");
  }
  KeyPtr key(EVP_EC_gen("P-256"));
  X509Ptr cert(X509_new());
  if (!key || !cert) return absl::InternalError(OpensslError("key"));
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) {
    return absl::InternalError(OpensslError("serial"));
  }
  serial[0] &= 0x7f;  // a positive INTEGER
  std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>> bn(
      BN_bin2bn(serial, sizeof(serial), nullptr));
  X509_NAME* name = X509_get_subject_name(cert.get());
  const auto* cn =
      reinterpret_cast<const unsigned char*>(spec.common_name.c_str());
  const auto* org = reinterpret_cast<const unsigned char*>("strata");
  if (X509_set_version(cert.get(), 2) != 1 || !bn ||
      !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) ||
      !ASN1_TIME_set(X509_getm_notBefore(cert.get()),
                     absl::ToTimeT(spec.not_before)) ||
      !ASN1_TIME_set(X509_getm_notAfter(cert.get()),
                     absl::ToTimeT(spec.not_after)) ||
      X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, org, -1, -1, 0) !=
          1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, cn, -1, -1, 0) !=
          1 ||
      X509_set_pubkey(cert.get(), key.get()) != 1) {
    return absl::InternalError(OpensslError("certificate fields"));
  }
  if (issuer == nullptr) issuer = cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer)) != 1) {
    return absl::InternalError(OpensslError("issuer"));
  }
  X509* self = cert.get();
  STRATA_RETURN_IF_ERROR(
      AddExtension(self, issuer, NID_subject_key_identifier, "hash"));
  STRATA_RETURN_IF_ERROR(AddExtension(self, issuer,
                                      NID_authority_key_identifier,
                                      ca ? "keyid:always" : "keyid"));
  if (ca) {
    STRATA_RETURN_IF_ERROR(
        AddExtension(self, issuer, NID_basic_constraints, "critical,CA:TRUE"));
    STRATA_RETURN_IF_ERROR(AddExtension(self, issuer, NID_key_usage,
                                        "critical,keyCertSign,cRLSign"));
  } else {
    STRATA_RETURN_IF_ERROR(
        AddExtension(self, issuer, NID_basic_constraints, "critical,CA:FALSE"));
    STRATA_RETURN_IF_ERROR(
        AddExtension(self, issuer, NID_key_usage, "critical,digitalSignature"));
    STRATA_RETURN_IF_ERROR(
        AddExtension(self, issuer, NID_ext_key_usage, "serverAuth,clientAuth"));
  }
  if (!spec.alt_names.empty()) {
    STRATA_RETURN_IF_ERROR(AddExtension(self, issuer, NID_subject_alt_name,
                                        AltNames(spec.alt_names)));
  }
  if (X509_sign(self, issuer_key ? issuer_key : key.get(), EVP_sha256()) <= 0) {
    return absl::InternalError(OpensslError("signing"));
  }
  CertAndKey out;
  STRATA_ASSIGN_OR_RETURN(
      out.cert_pem, ToPem([&](BIO* b) { return PEM_write_bio_X509(b, self); }));
  STRATA_ASSIGN_OR_RETURN(out.key_pem, ToPem([&](BIO* b) {
                            return PEM_write_bio_PrivateKey(b, key.get(),
                                                            nullptr, nullptr, 0,
                                                            nullptr, nullptr);
                          }));
  return out;
}

absl::Status WriteFile(const std::filesystem::path& path,
                       const std::string& data, bool secret) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path.string()));
  }
  if (secret) ::chmod(path.c_str(), 0600);  // before the key goes in
  f << data;
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat("writing ", path.string()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CertAndKey> MakeCa(const CertSpec& spec) {
  return Make(spec, nullptr, nullptr, /*ca=*/true);
}

absl::StatusOr<CertAndKey> IssueCert(const CertAndKey& ca,
                                     const CertSpec& spec) {
  BioPtr cert_bio(BIO_new_mem_buf(ca.cert_pem.data(),
                                  static_cast<int>(ca.cert_pem.size())));
  BioPtr key_bio(
      BIO_new_mem_buf(ca.key_pem.data(), static_cast<int>(ca.key_pem.size())));
  X509Ptr ca_cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  KeyPtr ca_key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!ca_cert || !ca_key) {
    return absl::InvalidArgumentError(OpensslError("reading the CA"));
  }
  return Make(spec, ca_cert.get(), ca_key.get(), /*ca=*/false);
}

absl::Status WriteClusterCerts(const ClusterCertsOptions& options) {
  namespace fs = std::filesystem;
  const fs::path dir(options.out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  std::vector<std::string> names = {"ca"};
  for (Role r : kAllRoles) names.push_back(std::string(RoleName(r)));
  if (!options.overwrite) {
    for (const std::string& n : names) {
      if (fs::exists(dir / (n + ".pem")) || fs::exists(dir / (n + ".key"))) {
        return absl::AlreadyExistsError(absl::StrCat(
            (dir / (n + ".pem")).string(),
            " exists; pass --overwrite to make a new CA (members holding "
            "the old certificates are then refused)"));
      }
    }
  }
  const absl::Time now = absl::Now();
  CertSpec ca_spec{.common_name = "strata-ca",
                   .not_before = now - absl::Minutes(5),
                   .not_after = now + options.valid_for};
  STRATA_ASSIGN_OR_RETURN(CertAndKey ca, MakeCa(ca_spec));
  STRATA_RETURN_IF_ERROR(WriteFile(dir / "ca.pem", ca.cert_pem, false));
  STRATA_RETURN_IF_ERROR(WriteFile(dir / "ca.key", ca.key_pem, true));
  for (Role r : kAllRoles) {
    CertSpec spec{.common_name = std::string(RoleName(r)),
                  .alt_names = {RoleHostName(r)},
                  .not_before = ca_spec.not_before,
                  .not_after = ca_spec.not_after};
    spec.alt_names.insert(spec.alt_names.end(), options.hosts.begin(),
                          options.hosts.end());
    STRATA_ASSIGN_OR_RETURN(CertAndKey ck, IssueCert(ca, spec));
    const std::string base(RoleName(r));
    STRATA_RETURN_IF_ERROR(
        WriteFile(dir / (base + ".pem"), ck.cert_pem, false));
    STRATA_RETURN_IF_ERROR(WriteFile(dir / (base + ".key"), ck.key_pem, true));
  }
  return absl::OkStatus();
}

}  // namespace strata
