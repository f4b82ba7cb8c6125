#include "rpc/health.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace strata {
namespace {

TEST(HealthServer, AnswersNotServingUntilToldOtherwise) {
  auto h = HealthServer::Start("127.0.0.1:0");
  ASSERT_TRUE(h.ok()) << h.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*h)->port());
  EXPECT_EQ(CheckHealth(address).value_or(true), false);
  (*h)->SetServing(true);
  EXPECT_EQ(CheckHealth(address).value_or(false), true);

  // Watch: the status now, then each change.
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  auto reader = stub->Watch(&ctx, grpc::health::v1::HealthCheckRequest());
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  (*h)->SetServing(false);
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  ctx.TryCancel();

  // Only the whole server's health is known.
  grpc::ClientContext named;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("strata.v1.Scheduler");
  EXPECT_EQ(stub->Check(&named, req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);

  h->reset();
  absl::StatusOr<bool> gone = CheckHealth(address, absl::Seconds(1));
  EXPECT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find(address), std::string::npos)
      << gone.status();
}

TEST(HealthServer, RefusesAnAddressInUse) {
  auto first = HealthServer::Start("127.0.0.1:0");
  ASSERT_TRUE(first.ok());
  auto second =
      HealthServer::Start(absl::StrCat("127.0.0.1:", (*first)->port()));
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
}

}  // namespace
}  // namespace strata
