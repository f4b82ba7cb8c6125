// `strata ledger`: the data ledger's applied records as JSON lines, and an
// audit of the exactly-once promise (scheduler/ledger_audit.h).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/ops.h"
#include "cluster/scheduler_client.h"
#include "common/status.h"
#include "scheduler/ledger_audit.h"

namespace strata {
namespace {

struct LedgerFlags {
  std::string scheduler;
  std::string dir;
  std::string out;
  bool check = false;
  TlsFlags tls;
};

absl::StatusOr<std::vector<v1::LedgerRecord>> Fetch(const LedgerFlags& f) {
  if (!f.dir.empty()) return ReadLedgerDir(f.dir);
  SchedulerClientOptions o;
  o.scheduler_address = f.scheduler;
  o.role = v1::ROLE_CLIENT;
  STRATA_ASSIGN_OR_RETURN(o.security, LoadSecurity(f.tls, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(auto client, SchedulerClient::Connect(o));
  return client->ExportLedger();
}

int Run(const LedgerFlags& f) {
  absl::StatusOr<std::vector<v1::LedgerRecord>> records = Fetch(f);
  if (!records.ok()) return ReportStatus("ledger", records.status());
  if (!f.out.empty() || !f.check) {
    std::ofstream file;
    if (!f.out.empty()) file.open(f.out, std::ios::trunc);
    std::ostream& os = f.out.empty() ? std::cout : file;
    for (const v1::LedgerRecord& r : *records) {
      if (!r.in_flight()) os << LedgerRecordJson(r) << "\n";
    }
    os.flush();
    if (!os) {
      return ReportStatus(
          "ledger", absl::InternalError(absl::StrCat("cannot write ", f.out)));
    }
  }
  absl::StatusOr<LedgerAudit> audit = AuditLedger(*records);
  if (!audit.ok()) return ReportStatus("ledger", audit.status());
  // The summary goes to stderr unless it is what was asked for.
  std::fprintf(f.check ? stdout : stderr, "ledger: %s\n",
               audit->ToString().c_str());
  if (f.check && !audit->exactly_once()) {
    return ReportStatus(
        "ledger", absl::DataLossError("samples were lost or applied twice"));
  }
  return 0;
}

}  // namespace

CommandFn AddLedgerCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "ledger",
      "Write the data ledger's applied units as JSON lines, one per unit: "
      "{\"epoch\",\"unit\",\"ranges\":[[a,b)],\"step\",\"worker\","
      "\"incarnation\",\"member\"}");
  auto f = std::make_shared<LedgerFlags>();
  f->scheduler = "127.0.0.1:7070";
  auto* from = cmd->add_option_group("source");
  from->add_option("--scheduler", f->scheduler,
                   "a running scheduler's host:port")
      ->check(DialAddress());
  from->add_option("--dir", f->dir,
                   "a stopped scheduler's --data_dir (read offline)")
      ->check(CLI::ExistingDirectory);
  from->require_option(0, 1);
  cmd->add_option("--out", f->out,
                  "write the JSON lines here (default: stdout)");
  cmd->add_flag("--check", f->check,
                "print the audit; exit 1 unless every sample of each finished "
                "data epoch was applied exactly once");
  AddTlsFlags(cmd, &f->tls, /*listens=*/false);
  return [f] { return Run(*f); };
}

}  // namespace strata
