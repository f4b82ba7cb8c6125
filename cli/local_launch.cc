#include "cli/local_launch.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "cli/ops.h"
#include "cli/plot.h"
#include "cli/process.h"
#include "cli/signals.h"
#include "cli/supervise.h"
#include "common/consistency.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "security/certs.h"
#include "security/tls.h"
#include "spdlog/spdlog.h"
#include "storage/files.h"

namespace strata {

absl::Status SavePlan(const LocalPlan& p, const std::string& path) {
  const nlohmann::json j = {{"servers", p.servers},
                            {"replicas", p.replicas},
                            {"workers", p.workers},
                            {"consistency", p.consistency},
                            {"snapshot_every", p.snapshot_every},
                            {"toy", p.toy},
                            {"tls", p.tls},
                            {"ram_budget", p.ram_budget},
                            {"tokenizer_dir", p.tokenizer_dir},
                            {"worker_args", p.worker_args},
                            {"straggler", p.straggler},
                            {"straggler_args", p.straggler_args}};
  return WriteFileSynced(path, j.dump(1) + "\n");
}

std::string ReplicaDir(const std::string& dir, int replica, int slot) {
  return replica == 0
             ? absl::StrCat(dir, "/server-", slot)
             : absl::StrCat(dir, "/replica-", replica, "/server-", slot);
}

absl::StatusOr<LocalPlan> LoadPlan(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read ", path, ": not the directory of a `strata local` run"));
  }
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  LocalPlan p;
  try {
    p.servers = j.at("servers").get<int>();
    p.workers = j.at("workers").get<int>();
    p.replicas = j.value("replicas", 1);  // absent in runs before replicas
    p.consistency = j.at("consistency").get<std::string>();
    p.snapshot_every = j.at("snapshot_every").get<int64_t>();
    p.toy = j.at("toy").get<bool>();
    p.tls = j.value("tls", false);  // absent in runs before TLS
    p.ram_budget = j.value("ram_budget", uint64_t{0});  // and before tiers
    p.tokenizer_dir = j.value("tokenizer_dir", std::string());
    p.worker_args = j.at("worker_args").get<std::vector<std::string>>();
    p.straggler = j.value("straggler", -1);  // absent before --straggler
    p.straggler_args = j.value("straggler_args", std::vector<std::string>());
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, " is malformed: ", e.what()));
  }
  if (p.servers < 1 || p.workers < 1 || p.replicas < 1 ||
      p.worker_args.empty() || p.straggler < -1 || p.straggler >= p.workers)
    return absl::DataLossError(absl::StrCat(path, " is malformed"));
  return p;
}

namespace {

// The TLS flags of a process of `role`, with the certificates in
// <dir>/certs (made on the first launch, kept on --resume); none without
// TLS.
absl::StatusOr<std::vector<std::string>> TlsArgs(const LocalPlan& o,
                                                 const std::string& dir,
                                                 Role role) {
  if (!o.tls) return std::vector<std::string>();
  const std::string certs = dir + "/certs";
  if (!std::filesystem::exists(certs + "/ca.pem")) {
    STRATA_RETURN_IF_ERROR(WriteClusterCerts({.out_dir = certs}));
  }
  const std::string base = absl::StrCat(certs, "/", RoleName(role));
  return std::vector<std::string>{"--tls_cert", base + ".pem",
                                  "--tls_key",  base + ".key",
                                  "--tls_ca",   certs + "/ca.pem"};
}

// One `strata local` launch, in phases: the run's directory, the TLS
// files, the scheduler, the servers, the workers, then supervision until
// the workers end. The scheduler and servers stop with it.
class LocalLaunch {
 public:
  LocalLaunch(const LocalPlan& o, std::string dir, int64_t resume_step)
      : o_(o), dir_(std::move(dir)), resume_step_(resume_step) {}
  ~LocalLaunch() { StopDaemons(); }

  // Makes the directory (a fresh one under /tmp without --dir) and, on the
  // first launch, copies the tokenizer and saves the plan.
  absl::Status PrepareDir();
  absl::Status LoadTls();
  absl::Status StartScheduler();
  // The servers: with replicas, each slot's first (<dir>/server-<s>)
  // before the others (AwaitFirstReplicas).
  absl::Status StartServers();
  absl::Status StartWorkers();
  // Until the workers end (restarting dead servers under BSP) or a signal;
  // the process's exit code, reported.
  int Supervise(bool bsp);
  void StopDaemons();

 private:
  void WithTls(std::vector<std::string>& args, Role r) const {
    const std::vector<std::string>& t = tls_[static_cast<int>(r)];
    args.insert(args.end(), t.begin(), t.end());
  }
  int Report(const WorkersEnd& end, bool interrupted) const;
  // Where slot `slot`'s first replica writes its address once serving.
  std::string FirstReplicaAddressFile(int slot) const;
  void AwaitFirstReplicas();

  const LocalPlan& o_;
  std::string dir_;
  const int64_t resume_step_;
  std::vector<std::string> tls_[3];  // by Role: scheduler, server, worker
  std::string address_;              // the scheduler's
  std::vector<pid_t> daemons_;       // scheduler + servers, stopped at the end
  // Each server's command line, to start it again should it die.
  absl::flat_hash_map<pid_t, ServerProcess> servers_;
  std::vector<pid_t> workers_;
};

absl::Status LocalLaunch::PrepareDir() {
  if (dir_.empty()) {
    char tmpl[] = "/tmp/strata-local-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
    dir_ = tmpl;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the run's directory ", dir_, ": ",
                     ec.message(), " (pick another --dir)"));
  }
  spdlog::info(
      "strata local: {} servers x {} replica(s), {} workers, {}, "
      "state in {}{}",
      o_.servers, o_.replicas, o_.workers, o_.consistency, dir_,
      resume_step_ >= 0 ? absl::StrCat("; resuming at step ", resume_step_)
                        : "");
  if (resume_step_ < 0) {
    // `strata generate` and `strata export` find the tokenizer here. Before
    // the plan: a run whose copy failed is not taken for one that started.
    if (std::optional<TokenizerFiles> files =
            FindTokenizerFiles(o_.tokenizer_dir);
        files && !o_.tokenizer_dir.empty()) {
      STRATA_RETURN_IF_ERROR(CopyTokenizerFiles(*files, dir_ + "/tokenizer"));
    }
    STRATA_RETURN_IF_ERROR(SavePlan(o_, dir_ + "/local.json"));
  }
  return absl::OkStatus();
}

absl::Status LocalLaunch::LoadTls() {
  for (Role r : {Role::kScheduler, Role::kServer, Role::kWorker}) {
    STRATA_ASSIGN_OR_RETURN(tls_[static_cast<int>(r)], TlsArgs(o_, dir_, r));
  }
  return absl::OkStatus();
}

absl::Status LocalLaunch::StartScheduler() {
  const std::string address_file = dir_ + "/scheduler.address";
  std::error_code ec;
  std::filesystem::remove(address_file, ec);
  std::vector<std::string> args = {"scheduler",
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--num_shards",
                                   std::to_string(o_.servers),
                                   "--replicas",
                                   std::to_string(o_.replicas),
                                   "--consistency",
                                   o_.consistency,
                                   "--data_dir",
                                   dir_ + "/scheduler",
                                   "--address_file",
                                   address_file,
                                   "--metrics_port",
                                   "0"};
  if (resume_step_ >= 0) {
    args.insert(args.end(), {"--resume_step", std::to_string(resume_step_)});
  }
  WithTls(args, Role::kScheduler);
  STRATA_ASSIGN_OR_RETURN(const pid_t pid, SpawnSelf(args));
  daemons_.push_back(pid);
  STRATA_ASSIGN_OR_RETURN(address_,
                          WaitForFile(address_file, absl::Seconds(30)));
  return absl::OkStatus();
}

absl::Status LocalLaunch::StartServers() {
  for (int n = 0; n < o_.servers * o_.replicas; ++n) {
    const int s = n % o_.servers;
    if (n == o_.servers) AwaitFirstReplicas();
    std::vector<std::string> args = {"server",
                                     "--scheduler",
                                     address_,
                                     "--shard",
                                     std::to_string(s),
                                     "--data_dir",
                                     ReplicaDir(dir_, n / o_.servers, s),
                                     "--snapshot_every",
                                     std::to_string(o_.snapshot_every),
                                     "--metrics_port",
                                     "0"};
    if (resume_step_ >= 0) {
      args.insert(args.end(), {"--restore_step", std::to_string(resume_step_)});
    }
    if (o_.ram_budget > 0) {
      args.insert(args.end(), {"--ram_budget", std::to_string(o_.ram_budget)});
    }
    if (n < o_.servers && o_.replicas > 1) {
      std::error_code ec;
      std::filesystem::remove(FirstReplicaAddressFile(s), ec);
      args.insert(args.end(), {"--address_file", FirstReplicaAddressFile(s)});
    }
    WithTls(args, Role::kServer);
    STRATA_ASSIGN_OR_RETURN(const pid_t pid, SpawnSelf(args));
    daemons_.push_back(pid);
    servers_[pid] = ServerProcess{s, std::move(args)};
  }
  return absl::OkStatus();
}

std::string LocalLaunch::FirstReplicaAddressFile(int slot) const {
  return absl::StrCat(dir_, "/server-", slot, ".address");
}

void LocalLaunch::AwaitFirstReplicas() {
  // A slot's oldest server is its primary: the first replicas serve (and
  // have registered) before the others start, so <dir>/server-<s> is the
  // primary until it dies. One that does not come up is left to the
  // supervision; its slot's next replica is the primary then.
  for (int s = 0; s < o_.servers; ++s) {
    absl::StatusOr<std::string> serving =
        WaitForFile(FirstReplicaAddressFile(s), absl::Seconds(30));
    if (!serving.ok()) {
      spdlog::warn("strata local: server {} did not start serving: {}", s,
                   serving.status().ToString());
    }
  }
}

absl::Status LocalLaunch::StartWorkers() {
  for (int w = 0; w < o_.workers; ++w) {
    std::vector<std::string> args = o_.worker_args;
    args.insert(args.begin() + 1, {"--scheduler", address_});
    if (o_.toy) {
      args.insert(args.end(), {"--out", dir_ + "/weights.f32"});
    } else {
      // Health and metrics on free ports: `strata status` finds them in
      // the view.
      args.insert(args.end(),
                  {"--model_json", dir_ + "/model.json", "--metrics",
                   absl::StrCat(dir_, "/metrics-", w, ".jsonl"), "--listen",
                   "127.0.0.1:0", "--metrics_port", "0"});
    }
    if (w == o_.straggler) {
      args.insert(args.end(), o_.straggler_args.begin(),
                  o_.straggler_args.end());
    }
    WithTls(args, Role::kWorker);
    STRATA_ASSIGN_OR_RETURN(const pid_t pid, SpawnSelf(args));
    workers_.push_back(pid);
  }
  return absl::OkStatus();
}

void LocalLaunch::StopDaemons() {
  for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it)
    StopChild(*it, absl::Seconds(10));
  daemons_.clear();
}

int LocalLaunch::Supervise(bool bsp) {
  // Ctrl-C (or SIGTERM): on a terminal the children got SIGINT too; either
  // way stop the workers, then the servers and the scheduler below.
  static std::atomic<bool> interrupted{false};
  OnShutdownSignal([workers = workers_] {
    interrupted = true;
    spdlog::warn("strata local: interrupted; stopping the cluster");
    for (pid_t w : workers) kill(w, SIGTERM);
  });
  const WorkersEnd end =
      SuperviseUntilWorkersEnd(workers_, servers_, daemons_, interrupted, bsp);
  StopDaemons();
  return Report(end, interrupted);
}

int LocalLaunch::Report(const WorkersEnd& end, bool interrupted) const {
  if (interrupted) {
    spdlog::info(
        "strata local: stopped; state in {} (go on with: strata local "
        "--resume {})",
        dir_, dir_);
    return 130;
  }
  if (!end.stopped_because.empty()) {
    spdlog::error(
        "strata local: stopped: {}; state in {} (go on with: strata local "
        "--resume {})",
        end.stopped_because, dir_, dir_);
    return 1;
  }
  if (end.failed > 0) {
    spdlog::error("strata local: {} worker(s) failed", end.failed);
    return 1;
  }
  spdlog::info("strata local: done; snapshots and metrics in {}", dir_);
  if (!o_.toy) {
    absl::StatusOr<std::string> plot = PlotRun(dir_, "");
    if (plot.ok()) {
      spdlog::info("strata local: curves in {}", *plot);
    } else {
      spdlog::warn("strata local: no plot: {}", plot.status().ToString());
    }
    spdlog::info(
        "strata local: sample from the model with: strata generate --dir {}",
        dir_);
  }
  return 0;
}

}  // namespace

int Launch(const LocalPlan& o, std::string dir, int64_t resume_step) {
  // auto: a server that dies ends the run, as under SSP and ASP (once the
  // job has switched from BSP nothing rolls back).
  const absl::StatusOr<std::optional<AutoConsistency>> automatic =
      ParseAutoConsistency(o.consistency);
  if (!automatic.ok()) return ReportStatus("local", automatic.status());
  bool restart_servers = false;
  if (!automatic->has_value()) {
    const absl::StatusOr<Consistency> fixed = ParseConsistency(o.consistency);
    if (!fixed.ok()) return ReportStatus("local", fixed.status());
    restart_servers = fixed->mode == Consistency::kBsp;
  }
  LocalLaunch launch(o, std::move(dir), resume_step);
  for (absl::Status (LocalLaunch::*phase)() :
       {&LocalLaunch::PrepareDir, &LocalLaunch::LoadTls,
        &LocalLaunch::StartScheduler, &LocalLaunch::StartServers,
        &LocalLaunch::StartWorkers}) {
    if (absl::Status s = (launch.*phase)(); !s.ok()) {
      launch.StopDaemons();
      return ReportStatus("local", s);
    }
  }
  return launch.Supervise(restart_servers);
}

}  // namespace strata
