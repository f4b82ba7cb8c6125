// `strata certs`: a CA and a certificate per role, for a test or small
// cluster (security/certs.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "security/certs.h"

namespace strata {

CommandFn AddCertsCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "certs",
      "Make a CA and certificates for the scheduler, servers, workers and "
      "client tools (mutual TLS: --tls_cert, --tls_key, --tls_ca)");
  auto o = std::make_shared<ClusterCertsOptions>();
  auto days = std::make_shared<int>(365);
  cmd->add_option("--out", o->out_dir,
                  "directory for ca.pem, ca.key and <role>.pem, <role>.key")
      ->required();
  cmd->add_option("--hosts", o->hosts,
                  "host names and addresses the members are dialled at, "
                  "added to every certificate (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--days", *days, "how long the certificates are valid")
      ->check(CLI::Range(1, 3650))
      ->capture_default_str();
  cmd->add_flag("--overwrite", o->overwrite,
                "replace the CA and certificates in --out (members holding "
                "the old ones are then refused)");
  return [o, days] {
    o->valid_for = absl::Hours(24) * *days;
    if (int rc = ReportStatus("certs", WriteClusterCerts(*o))) return rc;
    std::printf(
        "%s: ca.pem (give it to every member), ca.key (keep it "
        "offline), and scheduler, server, worker, client .pem/.key\n"
        "each role runs with --tls_cert %s/<role>.pem --tls_key "
        "%s/<role>.key --tls_ca %s/ca.pem\n",
        o->out_dir.c_str(), o->out_dir.c_str(), o->out_dir.c_str(),
        o->out_dir.c_str());
    return 0;
  };
}

}  // namespace strata
