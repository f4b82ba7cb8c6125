// Serves a Metrics (common/metrics.h) over HTTP for Prometheus: GET
// /metrics answers the text exposition. One per process role, started from
// the CLI with --metrics_port.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto endpoint,
//                           MetricsEndpoint::Start("127.0.0.1", 9100, &m));
//   ... endpoint->port() ...   // stops serving when destroyed
// or, where the Metrics comes into being only after its address must be
// known (a server registers its metrics address as it starts):
//   auto endpoint = MetricsEndpoint::Bind(host, port);   // port known
//   ... (*endpoint)->Serve(&server->metrics());
#ifndef STRATA_COMMON_METRICS_HTTP_H_
#define STRATA_COMMON_METRICS_HTTP_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace strata {

class MetricsEndpoint {
 public:
  // Listens on host:port (port 0: any free port); answers 503 until Serve.
  // UNAVAILABLE if it cannot bind; INVALID_ARGUMENT for a port
  // outside 0..65535.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Bind(
      const std::string& host, int port);
  // Starts answering with `metrics`, which must outlive the endpoint.
  void Serve(const Metrics* metrics);
  // Bind, then Serve.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& host, int port, const Metrics* metrics);
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  // Stops serving and joins the serving thread.
  ~MetricsEndpoint();

  int port() const { return port_; }
  // "host:port" as bound.
  std::string address() const;

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::atomic<const Metrics*> metrics_{nullptr};
  std::string host_;
  int port_ = 0;
};

// GETs http://<address>/metrics ("host:port") within `timeout_s` and
// returns the body. UNAVAILABLE when nothing answers; INTERNAL for a status
// other than 200.
absl::StatusOr<std::string> ScrapeMetrics(const std::string& address,
                                          double timeout_s = 5);

// The value of the first sample of `text` (a /metrics body) whose name and
// labels are exactly `series` (e.g. `strata_pushes_total` or
// `strata_requests_total{method="push",code="OK"}`); NOT_FOUND if none.
absl::StatusOr<double> SampleValue(const std::string& text,
                                   const std::string& series);

}  // namespace strata

#endif  // STRATA_COMMON_METRICS_HTTP_H_
