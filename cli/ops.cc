#include "cli/ops.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/host_port.h"
#include "common/status.h"
#include "security/role_check.h"
#include "spdlog/spdlog.h"

namespace strata {

void AddMetricsFlags(CLI::App* cmd, MetricsFlags* flags) {
  cmd->add_option("--metrics_port", flags->port,
                  "serve Prometheus metrics over HTTP on this port at "
                  "/metrics (0: any free port; unset: none)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics_host", flags->host,
                  "address the metrics endpoint listens on (0.0.0.0: every "
                  "interface)")
      ->capture_default_str();
}

CLI::Option* AddByteSizeFlag(CLI::App* cmd, const std::string& name,
                             uint64_t* bytes, const std::string& description,
                             std::function<std::string(uint64_t)> check) {
  return cmd
      ->add_option_function<std::string>(
          name,
          [bytes](const std::string& text) { *bytes = *ParseByteSize(text); },
          description)
      ->check([check](const std::string& text) -> std::string {
        absl::StatusOr<uint64_t> b = ParseByteSize(text);
        if (!b.ok()) return std::string(b.status().message());
        return check ? check(*b) : "";
      });
}

namespace {

CLI::Validator NumberAtLeast(double lowest, bool inclusive,
                             const std::string& want) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const std::string quoted =
            text.size() > 32 ? text.substr(0, 32) + "..." : text;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == nullptr || *end != '\0' ||
            !std::isfinite(v) || v < lowest || (!inclusive && v == lowest)) {
          return absl::StrCat("'", quoted, "' is not ", want);
        }
        return "";
      },
      want);
}

}  // namespace

CLI::Validator PositiveNumber() {
  return NumberAtLeast(0, /*inclusive=*/false, "a positive number");
}

CLI::Validator NonNegativeNumber() {
  return NumberAtLeast(0, /*inclusive=*/true, "a number >= 0");
}

CLI::Validator DialAddress() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        absl::StatusOr<HostPort> a = ParseHostPort(text);
        if (!a.ok()) return std::string(a.status().message());
        return a->port == 0 ? "port 0 cannot be dialed" : "";
      },
      "HOST:PORT");
}

void AddWireFlags(CLI::App* cmd, WireKind* wire, bool* insecure,
                  const std::string& description) {
  cmd->add_option_function<std::string>(
         "--wire",
         [wire](const std::string& text) {
           // The check below has refused anything else.
           *wire = ParseWireKind(text).value_or(*wire);
         },
         description)
      ->check(CLI::IsMember({"grpc", "ucx", "auto"}));
  cmd->add_option("--bulk_insecure", *insecure,
                  "under mutual TLS, leave the bulk plane's payloads "
                  "unsealed (a trusted fabric only)")
      ->capture_default_str();
}

CLI::Option* AddConsistencyFlag(CLI::App* cmd,
                                std::function<void(const Consistency&)> set,
                                const std::string& description) {
  return cmd
      ->add_option_function<std::string>(
          "--consistency",
          [set](const std::string& text) { set(*ParseConsistency(text)); },
          description)
      ->check([](const std::string& text) -> std::string {
        absl::StatusOr<Consistency> c = ParseConsistency(text);
        return c.ok() ? "" : std::string(c.status().message());
      });
}

void AddRamBudgetFlag(CLI::App* cmd, uint64_t* bytes) {
  AddByteSizeFlag(cmd, "--ram_budget", bytes,
                  "RAM for parameter tiles (weights and optimizer state) per "
                  "server, e.g. 2GiB; the rest spills to <data_dir>/spill on "
                  "disk and is read back when used (unset: everything in "
                  "RAM)",
                  [](uint64_t b) -> std::string {
                    return b == 0 ? "a RAM budget must be more than 0 bytes"
                                  : "";
                  });
}

void AddTlsFlags(CLI::App* cmd, TlsFlags* flags, bool listens) {
  // From the environment too, so a container's health check (the same
  // image for every role) finds its role's files.
  cmd->add_option("--tls_cert", flags->files.cert,
                  "this member's certificate (PEM; `strata certs` makes "
                  "them); with --tls_key and --tls_ca every channel is "
                  "mutual TLS")
      ->envname("STRATA_TLS_CERT");
  cmd->add_option("--tls_key", flags->files.key, "its private key (PEM)")
      ->envname("STRATA_TLS_KEY");
  cmd->add_option("--tls_ca", flags->files.ca,
                  "the CA certificate every member's certificate is "
                  "signed by (PEM)")
      ->envname("STRATA_TLS_CA");
  if (listens) {
    cmd->add_flag("--insecure", flags->insecure,
                  "allow listening without TLS on an address other than "
                  "loopback (anyone who reaches it can act as a member)");
  }
}

absl::StatusOr<std::shared_ptr<const Security>> LoadSecurity(
    const TlsFlags& flags, std::optional<Role> role,
    const std::vector<std::string>& listens) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const Security> security,
                          LoadForRole(flags.files, role, "--tls_cert"));
  for (const std::string& address : listens) {
    STRATA_RETURN_IF_ERROR(CheckListen(role ? RoleName(*role) : "strata",
                                       address, *security, flags.insecure));
  }
  return security;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> BindMetrics(
    const MetricsFlags& flags, const char* role) {
  if (flags.port < 0) return nullptr;
  auto endpoint = MetricsEndpoint::Bind(flags.host, flags.port);
  if (endpoint.ok()) {
    spdlog::info("strata {}: metrics on http://{}/metrics", role,
                 (*endpoint)->address());
  }
  return endpoint;
}

// Writes "address\n" atomically (rename), for parents waiting on it.
absl::Status WriteAddressFile(const std::string& path,
                              const std::string& address) {
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << address << "\n";
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

std::string DialableAddress(const std::string& host, int port) {
  const bool wildcard =
      host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
  return absl::StrCat(wildcard ? "127.0.0.1" : host, ":", port);
}

std::string MetricsAddress(const MetricsEndpoint* endpoint,
                           const MetricsFlags& flags,
                           const std::string& advertise) {
  if (endpoint == nullptr) return "";
  if (!advertise.empty()) {
    const size_t colon = advertise.rfind(':');
    return absl::StrCat(advertise.substr(0, colon), ":", endpoint->port());
  }
  return DialableAddress(flags.host, endpoint->port());
}

}  // namespace strata
