// `strata version`, `strata scheduler`, `strata server`.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/ops.h"
#include "cli/signals.h"
#include "common/consistency.h"
#include "common/malloc_tuning.h"
#include "common/status.h"
#include "scheduler/scheduler.h"
#include "server/parameter_server.h"
#include "spdlog/spdlog.h"

#ifndef STRATA_VERSION
#define STRATA_VERSION "dev"
#endif

namespace strata {

int ReportStatus(const char* command, const absl::Status& status) {
  if (status.ok()) return 0;
  spdlog::error("strata {}: {}", command, status.ToString());
  return 1;
}

CommandFn AddVersionCommand(CLI::App& app) {
  app.add_subcommand("version", "Print the version of this binary");
  return [] {
    std::printf("strata %s\n", STRATA_VERSION);
    return 0;
  };
}

CommandFn AddSchedulerCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "scheduler",
      "Run the scheduler: membership, view, shard map, rendezvous KV");
  auto o = std::make_shared<SchedulerOptions>();
  auto lease_ms =
      std::make_shared<int64_t>(absl::ToInt64Milliseconds(kDefaultLease));
  auto address_file = std::make_shared<std::string>();
  auto metrics = std::make_shared<MetricsFlags>();
  auto tls = std::make_shared<TlsFlags>();
  o->listen_address = "127.0.0.1:7070";
  cmd->add_option("--listen", o->listen_address,
                  "host:port to serve on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option(
      "--data_dir", o->data_dir,
      "RocksDB directory for the scheduler's state (empty: in memory)");
  cmd->add_option("--num_shards", o->num_shards,
                  "number of parameter-server shard slots")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->add_option("--replicas", o->replicas,
                  "servers per slot: a primary and its backups, each holding "
                  "every update the primary acknowledged")
      ->check(CLI::Range(1, kMaxReplicas))
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--consistency",
         [o](const std::string& text) {
           o->automatic = *ParseAutoConsistency(text);
           if (!o->automatic.has_value()) {
             o->consistency = *ParseConsistency(text);
           }
         },
         "bsp | ssp:<s> | asp | auto[:<max_staleness>[:ssp]] (auto: start "
         "in bsp, switch live by the measured step times; :ssp: never to "
         "asp)")
      ->check([](const std::string& text) -> std::string {
        absl::StatusOr<std::optional<AutoConsistency>> a =
            ParseAutoConsistency(text);
        if (!a.ok()) return std::string(a.status().message());
        if (a->has_value()) return "";
        absl::StatusOr<Consistency> c = ParseConsistency(text);
        return c.ok() ? "" : std::string(c.status().message());
      })
      ->default_str(o->consistency.ToString());
  cmd->add_option("--lease_ms", *lease_ms,
                  "member lease; a member silent this long is removed")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}))
      ->capture_default_str();
  cmd->add_option("--address_file", *address_file,
                  "write the bound address here once serving");
  cmd->add_option("--resume_step", o->resume_step,
                  "BSP: the job resumes at this step (its servers restored "
                  "that snapshot): forget the old members and the ledger's "
                  "later steps")
      ->check(NonNegativeNumber());
  AddMetricsFlags(cmd, metrics.get());
  AddTlsFlags(cmd, tls.get(), /*listens=*/true);
  return [o, lease_ms, address_file, metrics, tls] {
    auto security = LoadSecurity(*tls, Role::kScheduler, {o->listen_address});
    if (!security.ok()) return ReportStatus("scheduler", security.status());
    o->security = *security;
    o->lease = absl::Milliseconds(*lease_ms);
    auto scheduler = Scheduler::Start(*o);
    if (!scheduler.ok()) return ReportStatus("scheduler", scheduler.status());
    Scheduler* s = scheduler->get();
    // Declared after the scheduler: stops serving before it goes.
    auto endpoint = BindMetrics(*metrics, "scheduler");
    if (!endpoint.ok()) return ReportStatus("scheduler", endpoint.status());
    AddProcessMetrics(s->metrics(), o->data_dir);
    if (*endpoint) (*endpoint)->Serve(&s->metrics());
    OnShutdownSignal([s] { s->Shutdown(); });
    if (int rc = ReportStatus("scheduler",
                              WriteAddressFile(*address_file, s->address())))
      return rc;
    s->Wait();
    return 0;
  };
}

namespace {

// Where the served state comes from, for the serving line: the snapshot
// restored from the data directory and, when joining rolled the server back
// to the job's step, that step too (the newest snapshot of a restarted
// server may be newer than the job's last common one, or tagged by hand).
std::string StateNote(int64_t restored, int64_t state) {
  if (state < 0) return "";
  if (state == restored)
    return absl::StrCat(" (restored snapshot of step ", state, ")");
  if (restored < 0)
    return absl::StrCat(" (rolled back to the job's step ", state, ")");
  return absl::StrCat(" (state of step ", state, ": loaded snapshot of step ",
                      restored, ", then rolled back to the job's step ", state,
                      ")");
}

}  // namespace

CommandFn AddServerCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("server", "Run one parameter-server shard");
  auto o = std::make_shared<ServerOptions>();
  auto max_wait_s = std::make_shared<double>(120);
  auto address_file = std::make_shared<std::string>();
  auto metrics = std::make_shared<MetricsFlags>();
  auto tls = std::make_shared<TlsFlags>();
  cmd->add_option("--scheduler", o->scheduler_address, "scheduler host:port")
      ->required()
      ->check(DialAddress());
  cmd->add_option("--listen", o->listen_address,
                  "host:port to serve on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--advertise", o->advertise_address,
                  "address other members dial (default: 127.0.0.1:<port>)");
  cmd->add_option("--shard", o->shard, "shard slot to serve")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--data_dir", o->data_dir,
                  "directory for snapshots; the latest one is loaded at start");
  cmd->add_option("--restore_step", o->restore_step,
                  "load the snapshot of this step instead of the latest (a "
                  "job resuming at a step every server holds)")
      ->check(NonNegativeNumber());
  AddRamBudgetFlag(cmd, &o->ram_budget);
  cmd->add_option("--prefetch_depth", o->prefetch_depth,
                  "with --ram_budget: tiles read from disk ahead of use, in "
                  "the order the previous step used them (default: 4, none "
                  "with just_used, which --evict auto picks)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--write_behind", o->write_behind,
                  "with --ram_budget: write changed cold tiles out on a "
                  "thread of their own, so a spill only frees memory (false: "
                  "each spill writes its tile, on the request's time; with "
                  "--evict lru or farthest only)")
      ->capture_default_str();
  cmd->add_option(
         "--evict", o->evict,
         "with --ram_budget, which tile to spill first: lru (least "
         "recently used), farthest (next use farthest in the "
         "learned order), just_used (used last; no write-behind, and no "
         "read-ahead unless --prefetch_depth is given), auto "
         "(just_used)")
      ->check(CLI::IsMember({"auto", "lru", "farthest", "just_used"}))
      ->capture_default_str();
  AddByteSizeFlag(cmd, "--pinned_bytes", &o->pinned_bytes,
                  "with --ram_budget: RAM past the budget for tiles that BSP "
                  "pulls wait on (a step's commit serves the next step's "
                  "pulls from RAM before it spills their tiles), e.g. 32MiB "
                  "(the default); 0: none");
  AddConsistencyFlag(
      cmd, [o](const Consistency& c) { o->consistency = c; },
      "bsp | ssp:<s> | asp (default: the job's, from the scheduler)");
  cmd->add_option("--snapshot_every", o->snapshot_every,
                  "BSP: snapshot every N steps (0: never)")
      ->check(NonNegativeNumber());
  cmd->add_option("--keep_snapshots", o->keep_snapshots, "snapshots kept")
      ->check(PositiveNumber());
  cmd->add_option("--max_wait_s", *max_wait_s,
                  "longest a pull waits at the consistency gate")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--address_file", *address_file,
                  "write the advertised address here once serving");
  AddWireFlags(cmd, &o->wire, &o->bulk_insecure,
               "grpc: payloads in gRPC messages only; ucx or auto (the "
               "default): workers may also move them on the bulk plane (UCX, "
               "started at a worker's first attach)");
  AddMetricsFlags(cmd, metrics.get());
  AddTlsFlags(cmd, tls.get(), /*listens=*/true);
  return [o, max_wait_s, address_file, metrics, tls] {
    o->max_wait = absl::Seconds(*max_wait_s);
    auto security = LoadSecurity(*tls, Role::kServer, {o->listen_address});
    if (!security.ok()) return ReportStatus("server", security.status());
    o->security = *security;
    // Bound first: the server registers the endpoint's address as it
    // starts. It serves once the server's metrics exist.
    auto endpoint = BindMetrics(*metrics, "server");
    if (!endpoint.ok()) return ReportStatus("server", endpoint.status());
    o->metrics_address =
        MetricsAddress(endpoint->get(), *metrics, o->advertise_address);
    if (o->ram_budget > 0) TuneMallocForBudget();
    auto server = ParameterServer::Start(*o);
    if (!server.ok()) return ReportStatus("server", server.status());
    ParameterServer* s = server->get();
    AddProcessMetrics(s->metrics(), o->data_dir);
    if (*endpoint) (*endpoint)->Serve(&s->metrics());
    // The endpoint stops before the server it reads goes.
    auto stop_metrics = absl::MakeCleanup([&endpoint] { endpoint->reset(); });
    OnShutdownSignal([s] { s->Shutdown(); });
    spdlog::info("strata server: shard {} serving on {} ({}){}", o->shard,
                 s->address(), o->security->tls() ? "mutual TLS" : "plaintext",
                 StateNote(s->restored_step(), s->state_step()));
    if (int rc = ReportStatus("server",
                              WriteAddressFile(*address_file, s->address())))
      return rc;
    s->Wait();
    return ReportStatus("server", s->fatal());
  };
}

}  // namespace strata
