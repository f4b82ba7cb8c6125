#include "security/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace strata {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using StorePtr =
    std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr =
    std::unique_ptr<X509_STORE_CTX,
                    Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(
        absl::StrCat(flag, " ", path, ": cannot be read"));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

std::string CommonName(X509* cert) {
  char buf[256];
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert),
                                          NID_commonName, buf, sizeof(buf));
  return n > 0 ? std::string(buf, n) : std::string();
}

// The certificate's chain to one of the CA file's certificates, checked
// as of now (expiry included).
absl::Status VerifyAgainstCa(X509* cert, const std::string& ca_pem,
                             const std::string& cert_path,
                             const std::string& ca_path) {
  StorePtr store(X509_STORE_new());
  BioPtr bio = MemBio(ca_pem);
  int cas = 0;
  while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store.get(), ca);
    X509_free(ca);  // the store holds its own reference
    ++cas;
  }
  ERR_clear_error();  // the loop ends on "no start line"
  if (cas == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_ca ", ca_path, ": no PEM certificate in it"));
  }
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), cert, nullptr) != 1) {
    return absl::InternalError("cannot set up certificate verification");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--tls_cert ", cert_path, " does not verify against --tls_ca ", ca_path,
        ": ",
        X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()))));
  }
  return absl::OkStatus();
}

absl::string_view HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {  // [v6]:port
    const size_t close = address.find(']');
    return close == absl::string_view::npos ? address
                                            : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == absl::string_view::npos ? address : address.substr(0, colon);
}

bool IsLoopback(absl::string_view host) {
  if (host == "localhost") return true;
  const std::string h(host);
  // inet_aton, not inet_pton: it takes the short forms (127.1) that
  // getaddrinfo, and so gRPC, resolve to 127.0.0.1.
  in_addr v4;
  if (inet_aton(h.c_str(), &v4) != 0) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  return inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kScheduler:
      return "scheduler";
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
    case Role::kClient:
      return "client";
  }
  return "unknown";
}

std::optional<Role> ParseRole(absl::string_view name) {
  for (Role r : kAllRoles) {
    if (RoleName(r) == name) return r;
  }
  return std::nullopt;
}

std::string RoleHostName(Role role) {
  return absl::StrCat(RoleName(role), ".strata");
}

std::shared_ptr<const Security> Security::Plaintext() {
  static const auto* plain =
      new std::shared_ptr<const Security>(new Security());
  return *plain;
}

absl::StatusOr<std::shared_ptr<const Security>> Security::Load(
    const TlsFiles& files) {
  if (files.empty()) return Plaintext();
  std::vector<absl::string_view> missing;
  if (files.cert.empty()) missing.push_back("--tls_cert");
  if (files.key.empty()) missing.push_back("--tls_key");
  if (files.ca.empty()) missing.push_back("--tls_ca");
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(missing, ", "),
                     " missing: TLS needs --tls_cert, --tls_key and --tls_ca"));
  }
  std::shared_ptr<Security> s(new Security());
  STRATA_ASSIGN_OR_RETURN(s->cert_pem_, ReadPem(files.cert, "--tls_cert"));
  STRATA_ASSIGN_OR_RETURN(s->key_pem_, ReadPem(files.key, "--tls_key"));
  STRATA_ASSIGN_OR_RETURN(s->ca_pem_, ReadPem(files.ca, "--tls_ca"));
  BioPtr cert_bio = MemBio(s->cert_pem_);
  BioPtr key_bio = MemBio(s->key_pem_);
  X509Ptr cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!cert) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert ", files.cert, ": not a PEM certificate"));
  }
  if (!key) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key ", files.key, ": not a PEM private key"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key ", files.key, " is not the key of --tls_cert ", files.cert));
  }
  STRATA_RETURN_IF_ERROR(
      VerifyAgainstCa(cert.get(), s->ca_pem_, files.cert, files.ca));
  const std::string cn = CommonName(cert.get());
  s->role_ = ParseRole(cn);
  if (!s->role_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert ", files.cert, ": its common name '", cn,
        "' is no Strata role (scheduler, server, worker, client); make "
        "certificates with `strata certs`"));
  }
  s->tls_ = true;
  return std::shared_ptr<const Security>(std::move(s));
}

std::shared_ptr<grpc::ServerCredentials> Security::ServerCredentials() const {
  if (!tls_) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = ca_pem_;
  o.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::Channel> Security::Dial(
    const std::string& address, Role peer, grpc::ChannelArguments args) const {
  if (!tls_) {
    return grpc::CreateCustomChannel(address,
                                     grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_pem_;
  o.pem_private_key = key_pem_;
  o.pem_cert_chain = cert_pem_;
  args.SetSslTargetNameOverride(RoleHostName(peer));
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

absl::StatusOr<std::optional<Role>> Security::CallerRole(
    const grpc::ServerContextBase& ctx) const {
  if (!tls_) return std::optional<Role>();
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  const std::vector<grpc::string_ref> cns =
      auth ? auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)
           : std::vector<grpc::string_ref>();
  if (cns.empty()) {
    return absl::UnauthenticatedError(
        "no client certificate: this member requires mutual TLS");
  }
  const absl::string_view cn(cns.front().data(), cns.front().size());
  std::optional<Role> role = ParseRole(cn);
  if (!role) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the caller's certificate names no Strata role (CN=", cn, ")"));
  }
  return role;
}

absl::Status Security::Authorize(const grpc::ServerContextBase& ctx,
                                 absl::string_view method,
                                 std::initializer_list<Role> allowed) const {
  STRATA_ASSIGN_OR_RETURN(std::optional<Role> role, CallerRole(ctx));
  if (!role) return absl::OkStatus();
  for (Role r : allowed) {
    if (r == *role) return absl::OkStatus();
  }
  std::vector<absl::string_view> names;
  for (Role r : allowed) names.push_back(RoleName(r));
  return absl::PermissionDeniedError(
      absl::StrCat("a ", RoleName(*role), " may not call ", method,
                   " (allowed: ", absl::StrJoin(names, ", "), ")"));
}

absl::Status CheckListen(absl::string_view what, const std::string& address,
                         const Security& security, bool insecure) {
  if (security.tls() || insecure || absl::StartsWith(address, "unix:") ||
      IsLoopback(HostOf(address))) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": refusing to listen on ", address,
      " without TLS: anyone who can reach it could act as a member. Give "
      "--tls_cert, --tls_key and --tls_ca (`strata certs --out DIR` makes "
      "them), listen on 127.0.0.1, or pass --insecure on a network you "
      "trust"));
}

}  // namespace strata
