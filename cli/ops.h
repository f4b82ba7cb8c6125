// Operations flags every role shares: where it serves its Prometheus
// metrics (common/metrics_http.h), and its TLS files (security/tls.h).
#ifndef STRATA_CLI_OPS_H_
#define STRATA_CLI_OPS_H_

#include <functional>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "common/consistency.h"
#include "common/metrics_http.h"
#include "security/tls.h"
#include "transport/wire_kind.h"

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

struct TlsFlags {
  TlsFiles files;
  bool insecure = false;  // roles that listen: plaintext beyond loopback
};

// --tls_cert, --tls_key, --tls_ca on `cmd`; and --insecure when the command
// `listens`.
void AddTlsFlags(CLI::App* cmd, TlsFlags* flags, bool listens);

// The Security the flags give (plaintext when none is set). For a role
// (`role` set) the certificate must be that role's; a tool (nullopt)
// accepts any member's certificate. Each address in `listens` must pass
// CheckListen. Errors name the flag and the file.
absl::StatusOr<std::shared_ptr<const Security>> LoadSecurity(
    const TlsFlags& flags, std::optional<Role> role,
    const std::vector<std::string>& listens = {});

// A flag taking a byte size ("2GiB", "4MiB", "1024"; common/byte_size.h)
// into `bytes`; unset leaves it as it is. `check` says what is wrong with
// a size that parses ("" when nothing is).
CLI::Option* AddByteSizeFlag(
    CLI::App* cmd, const std::string& name, uint64_t* bytes,
    const std::string& description,
    std::function<std::string(uint64_t)> check = nullptr);

// CLI11's PositiveNumber and NonNegativeNumber say what is wanted in words
// (theirs print the whole double range: 300 digits) and quote only the
// start of what was given.
CLI::Validator PositiveNumber();
CLI::Validator NonNegativeNumber();
// host:port a peer can dial (common/host_port.h; port 0 refused).
CLI::Validator DialAddress();

// --consistency (bsp | ssp:<s> | asp), checked by ParseConsistency:
// `set` gets the parsed setting; unset calls nothing.
CLI::Option* AddConsistencyFlag(CLI::App* cmd,
                                std::function<void(const Consistency&)> set,
                                const std::string& description);

// --wire (grpc | ucx | auto, transport/wire_kind.h) into `wire`, and
// --bulk_insecure into `insecure`; `description` says what --wire means
// for the command.
void AddWireFlags(CLI::App* cmd, WireKind* wire, bool* insecure,
                  const std::string& description);

// --ram_budget on a command that starts servers: a byte size into
// `bytes`; unset leaves it 0.
void AddRamBudgetFlag(CLI::App* cmd, uint64_t* bytes);

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
