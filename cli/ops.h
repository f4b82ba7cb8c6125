// Operations flags every long-running role shares: where it serves its
// Prometheus metrics (common/metrics_http.h).
#ifndef STRATA_CLI_OPS_H_
#define STRATA_CLI_OPS_H_

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "common/metrics_http.h"

namespace strata {

struct MetricsFlags {
  int port = -1;  // -1: no endpoint; 0: any free port
  std::string host = "127.0.0.1";
};

// --metrics_port and --metrics_host on `cmd`.
void AddMetricsFlags(CLI::App* cmd, MetricsFlags* flags);

// Binds the endpoint the flags ask for and logs "strata <role>: metrics
// on http://host:port/metrics"; nullptr when --metrics_port is unset. The
// caller Serves its Metrics on it once they exist.
absl::StatusOr<std::unique_ptr<MetricsEndpoint>> BindMetrics(
    const MetricsFlags& flags, const char* role);

// Writes "address\n" to `path` atomically (rename), for a parent process
// or a container health check waiting on it; nothing for "" path.
absl::Status WriteAddressFile(const std::string& path,
                              const std::string& address);

// host:port others dial for something bound at `host`: 127.0.0.1 for a
// wildcard host.
std::string DialableAddress(const std::string& host, int port);
// The endpoint's address to register: the host of `advertise` (the role's
// own advertised host:port) when given, else DialableAddress of the
// listening host; "" for a null endpoint.
std::string MetricsAddress(const MetricsEndpoint* endpoint,
                           const MetricsFlags& flags,
                           const std::string& advertise);

}  // namespace strata

#endif  // STRATA_CLI_OPS_H_
