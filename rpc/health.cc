#include "rpc/health.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace strata {

void EnableHealthService() { grpc::EnableDefaultHealthCheckService(true); }

void SetServing(grpc::Server* server, bool serving) {
  if (grpc::HealthCheckServiceInterface* h = server->GetHealthCheckService()) {
    h->SetServingStatus(serving);
  }
}

class HealthServer::Service final : public grpc::health::v1::Health::Service {
 public:
  using Response = grpc::health::v1::HealthCheckResponse;

  void Set(bool serving) {
    absl::MutexLock lock(&mu_);
    serving_ = serving;
  }
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }

  grpc::Status Check(grpc::ServerContext*,
                     const grpc::health::v1::HealthCheckRequest* req,
                     Response* resp) override {
    if (!req->service().empty()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "only the whole server's health (\"\") is served");
    }
    absl::MutexLock lock(&mu_);
    resp->set_status(serving_ ? Response::SERVING : Response::NOT_SERVING);
    return grpc::Status::OK;
  }

  // Sends the status now and at each change, until the caller goes or the
  // server stops.
  grpc::Status Watch(grpc::ServerContext* ctx,
                     const grpc::health::v1::HealthCheckRequest* req,
                     grpc::ServerWriter<Response>* writer) override {
    Response resp;
    if (!req->service().empty()) {
      resp.set_status(Response::SERVICE_UNKNOWN);
      writer->Write(resp);
      return grpc::Status::OK;
    }
    absl::MutexLock lock(&mu_);
    std::optional<bool> sent;
    while (!stopped_ && !ctx->IsCancelled()) {
      if (sent != serving_) {
        sent = serving_;
        resp.set_status(serving_ ? Response::SERVING : Response::NOT_SERVING);
        mu_.Unlock();
        const bool ok = writer->Write(resp);
        mu_.Lock();
        if (!ok) break;
      }
      // Woken by a change; the timeout notices a caller that went.
      struct Changed {
        const bool* serving;
        const bool* stopped;
        const std::optional<bool>* sent;
        static bool Eval(Changed* c) {
          return *c->stopped || *c->serving != *c->sent;
        }
      } changed{&serving_, &stopped_, &sent};
      mu_.AwaitWithTimeout(absl::Condition(&Changed::Eval, &changed),
                           absl::Seconds(1));
    }
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

HealthServer::HealthServer() : service_(std::make_unique<Service>()) {}

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(
    const std::string& listen, const Security& security) {
  std::unique_ptr<HealthServer> h(new HealthServer());
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(listen, security.ServerCredentials(), &h->port_);
  builder.RegisterService(h->service_.get());
  h->server_ = builder.BuildAndStart();
  if (h->server_ == nullptr || h->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC health on ", listen));
  }
  return h;
}

HealthServer::~HealthServer() {
  service_->Stop();
  if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now()));
}

void HealthServer::SetServing(bool serving) { service_->Set(serving); }

absl::StatusOr<bool> CheckHealth(const std::string& address,
                                 absl::Duration timeout,
                                 const Security& security, Role peer) {
  auto stub = grpc::health::v1::Health::NewStub(security.Dial(address, peer));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckResponse resp;
  absl::Status s = FromGrpcStatus(
      stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp));
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("health of ", address, ": ", s.message()));
  }
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace strata
