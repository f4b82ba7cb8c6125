#include "security/tls.h"

#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>

#include "common/status.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "security/certs.h"
#include "testing/temp_dir.h"

namespace strata {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

// A service whose one method only workers may call: Check answers SERVING
// to a worker and refuses every other role.
class WorkersOnly final : public Health::Service {
 public:
  explicit WorkersOnly(const Security* security) : security_(security) {}
  grpc::Status Check(grpc::ServerContext* ctx, const HealthCheckRequest*,
                     HealthCheckResponse* resp) override {
    absl::Status s = security_->Authorize(*ctx, "Check", {Role::kWorker});
    if (s.ok()) resp->set_status(HealthCheckResponse::SERVING);
    return ToGrpcStatus(s);
  }

 private:
  const Security* security_;
};

class Tls : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = strata::testing::TempDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(WriteClusterCerts({.out_dir = dir_ + "/a"}).ok());
    ASSERT_TRUE(WriteClusterCerts({.out_dir = dir_ + "/b"}).ok());
  }

  TlsFiles Files(const std::string& ca_dir, Role role) {
    const std::string base =
        dir_ + "/" + ca_dir + "/" + std::string(RoleName(role));
    return {base + ".pem", base + ".key", dir_ + "/" + ca_dir + "/ca.pem"};
  }

  std::shared_ptr<const Security> Load(const TlsFiles& files) {
    auto s = Security::Load(files);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : nullptr;
  }

  // Serves WorkersOnly with `security` on a free loopback port.
  void Serve(std::shared_ptr<const Security> security) {
    server_security_ = std::move(security);
    service_ = std::make_unique<WorkersOnly>(server_security_.get());
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", server_security_->ServerCredentials(),
                       &port_);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  // Calls Check through `channel`.
  absl::Status Call(std::shared_ptr<grpc::Channel> channel) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    HealthCheckResponse resp;
    return FromGrpcStatus(
        Health::NewStub(channel)->Check(&ctx, HealthCheckRequest(), &resp));
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  std::string dir_;
  std::shared_ptr<const Security> server_security_;
  std::unique_ptr<WorkersOnly> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(Tls, AMemberOfTheSameCaWithAnAllowedRoleIsServed) {
  Serve(Load(Files("a", Role::kServer)));
  auto worker = Load(Files("a", Role::kWorker));
  EXPECT_TRUE(Call(worker->Dial(address(), Role::kServer)).ok());
}

TEST_F(Tls, ARoleTheMethodDoesNotAllowIsDeniedByName) {
  Serve(Load(Files("a", Role::kServer)));
  auto client = Load(Files("a", Role::kClient));
  absl::Status s = Call(client->Dial(address(), Role::kServer));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("a client may not call Check"));
}

TEST_F(Tls, ACertificateFromAnotherCaIsRefused) {
  Serve(Load(Files("a", Role::kServer)));
  auto stranger = Load(Files("b", Role::kWorker));
  absl::Status s = Call(stranger->Dial(address(), Role::kServer));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

TEST_F(Tls, APlaintextClientIsRefused) {
  Serve(Load(Files("a", Role::kServer)));
  absl::Status s = Call(Security::Plaintext()->Dial(address(), Role::kServer));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

TEST_F(Tls, AClientWithoutACertificateIsRefused) {
  Serve(Load(Files("a", Role::kServer)));
  std::ifstream f(Files("a", Role::kWorker).ca);
  std::string ca((std::istreambuf_iterator<char>(f)), {});
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca;  // trusts the server, presents nothing
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(RoleHostName(Role::kServer));
  absl::Status s =
      Call(grpc::CreateCustomChannel(address(), grpc::SslCredentials(o), args));
  EXPECT_FALSE(s.ok());
}

TEST_F(Tls, AnExpiredCertificateIsRefusedAtLoadAndAtTheHandshake) {
  Serve(Load(Files("a", Role::kServer)));
  std::ifstream cf(dir_ + "/a/ca.pem"), kf(dir_ + "/a/ca.key");
  CertAndKey ca{std::string((std::istreambuf_iterator<char>(cf)), {}),
                std::string((std::istreambuf_iterator<char>(kf)), {})};
  const absl::Time now = absl::Now();
  auto expired = IssueCert(ca, {.common_name = "worker",
                                .alt_names = {RoleHostName(Role::kWorker)},
                                .not_before = now - absl::Hours(48),
                                .not_after = now - absl::Hours(24)});
  ASSERT_TRUE(expired.ok()) << expired.status();
  std::ofstream(dir_ + "/old.pem") << expired->cert_pem;
  std::ofstream(dir_ + "/old.key") << expired->key_pem;

  auto loaded = Security::Load(
      {dir_ + "/old.pem", dir_ + "/old.key", dir_ + "/a/ca.pem"});
  EXPECT_TRUE(absl::IsFailedPrecondition(loaded.status())) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr("expired"));

  grpc::SslCredentialsOptions o{ca.cert_pem, expired->key_pem,
                                expired->cert_pem};
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(RoleHostName(Role::kServer));
  absl::Status s =
      Call(grpc::CreateCustomChannel(address(), grpc::SslCredentials(o), args));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

TEST_F(Tls, AClientRefusesAPeerHoldingAnotherRolesCertificate) {
  // A worker's certificate posing as a server.
  Serve(Load(Files("a", Role::kWorker)));
  auto worker = Load(Files("a", Role::kWorker));
  EXPECT_TRUE(
      absl::IsUnavailable(Call(worker->Dial(address(), Role::kServer))));
  EXPECT_TRUE(Call(worker->Dial(address(), Role::kWorker)).ok());
}

TEST_F(Tls, LoadNamesWhatIsWrong) {
  TlsFiles f = Files("a", Role::kWorker);
  auto missing = Security::Load({f.cert, "", f.ca});
  EXPECT_THAT(missing.status().message(), HasSubstr("--tls_key missing"));
  auto absent = Security::Load({f.cert, dir_ + "/nope.key", f.ca});
  EXPECT_THAT(absent.status().message(), HasSubstr("nope.key"));
  auto wrong_key =
      Security::Load({f.cert, Files("a", Role::kServer).key, f.ca});
  EXPECT_THAT(wrong_key.status().message(), HasSubstr("is not the key of"));
  auto other_ca = Security::Load({f.cert, f.key, Files("b", Role::kWorker).ca});
  EXPECT_THAT(other_ca.status().message(), HasSubstr("does not verify"));
  auto not_pem = Security::Load({f.key, f.key, f.ca});
  EXPECT_THAT(not_pem.status().message(), HasSubstr("not a PEM certificate"));
}

TEST_F(Tls, ACertificateNamingNoRoleIsRefusedAtLoad) {
  std::ifstream cf(dir_ + "/a/ca.pem"), kf(dir_ + "/a/ca.key");
  CertAndKey ca{std::string((std::istreambuf_iterator<char>(cf)), {}),
                std::string((std::istreambuf_iterator<char>(kf)), {})};
  auto odd = IssueCert(ca, {.common_name = "admin"});
  ASSERT_TRUE(odd.ok());
  std::ofstream(dir_ + "/odd.pem") << odd->cert_pem;
  std::ofstream(dir_ + "/odd.key") << odd->key_pem;
  auto s = Security::Load(
      {dir_ + "/odd.pem", dir_ + "/odd.key", dir_ + "/a/ca.pem"});
  EXPECT_THAT(s.status().message(), HasSubstr("'admin' is no Strata role"));
}

TEST(CheckListen, PlaintextOnlyOnLoopbackUnlessInsecure) {
  const Security& plain = *Security::Plaintext();
  EXPECT_TRUE(CheckListen("server", "127.0.0.1:0", plain, false).ok());
  EXPECT_TRUE(CheckListen("server", "127.3.2.1:7070", plain, false).ok());
  EXPECT_TRUE(CheckListen("server", "localhost:7070", plain, false).ok());
  EXPECT_TRUE(CheckListen("server", "[::1]:7070", plain, false).ok());
  // The short form getaddrinfo (and gRPC) resolve to 127.0.0.1.
  EXPECT_TRUE(CheckListen("server", "127.1:7070", plain, false).ok());
  absl::Status wild = CheckListen("server", "0.0.0.0:7070", plain, false);
  EXPECT_TRUE(absl::IsFailedPrecondition(wild)) << wild;
  EXPECT_THAT(wild.message(), HasSubstr("--insecure"));
  EXPECT_FALSE(CheckListen("server", "[::]:7070", plain, false).ok());
  EXPECT_FALSE(CheckListen("server", "10.0.0.5:7070", plain, false).ok());
  EXPECT_FALSE(CheckListen("server", "10.1:7070", plain, false).ok());
  EXPECT_TRUE(CheckListen("server", "0.0.0.0:7070", plain, true).ok());
}

}  // namespace
}  // namespace strata
