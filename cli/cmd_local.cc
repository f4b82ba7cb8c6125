// `strata local`: a whole cluster on this machine, as separate processes.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

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
#include "scheduler/ledger_audit.h"
#include "security/certs.h"
#include "security/tls.h"
#include "spdlog/spdlog.h"
#include "storage/files.h"
#include "storage/server_dirs.h"

namespace strata {
namespace {

struct LocalOptions {
  int servers = 2;
  int workers = 2;
  std::string consistency = "bsp";
  std::string work_dir;  // "" = a fresh /tmp/strata-local-XXXXXX
  int64_t snapshot_every = 100;
  bool toy = false;         // least-squares demo instead of a GPT
  bool tls = false;         // mutual TLS on every channel, certificates in dir
  uint64_t ram_budget = 0;  // per server; 0 = everything in RAM
  // GPT-2 tokenizer files, copied into <dir>/tokenizer/ ("": bytes).
  std::string tokenizer_dir;
  TrainerOptions train = DefaultTraining();

  // A small byte-level GPT that learns visible structure from Debian's
  // license texts in a few minutes on two CPU cores.
  static TrainerOptions DefaultTraining() {
    TrainerOptions t;
    t.model.layers = 4;
    t.model.heads = 4;
    t.model.width = 128;
    t.model.context = 64;
    t.batch = 16;
    t.steps = 1500;
    t.lr = 3e-3f;
    t.warmup_steps = 20;
    t.eval_every = 250;
    t.log_every = 50;
    return t;
  }
};

struct LocalPlan;
int Launch(const LocalPlan& o, std::string dir, int64_t resume_step);

// What a run starts, saved as <dir>/local.json so `--resume` starts the
// same job again.
struct LocalPlan {
  int servers = 2;
  int workers = 2;
  std::string consistency = "bsp";
  int64_t snapshot_every = 100;
  bool toy = false;
  bool tls = false;
  uint64_t ram_budget = 0;
  std::string tokenizer_dir;  // copied into the run on its first launch
  // The workers' flags, without --scheduler and the per-worker --metrics.
  std::vector<std::string> worker_args;
};

LocalPlan PlanOf(const LocalOptions& o) {
  LocalPlan p{o.servers,        o.workers,       o.consistency,
              o.snapshot_every, o.toy,           o.tls,
              o.ram_budget,     o.tokenizer_dir, {}};
  if (o.toy) {
    p.worker_args = {"toy", "--workers", std::to_string(o.workers), "--steps",
                     std::to_string(o.train.steps)};
  } else {
    p.worker_args = {"worker", "--workers", std::to_string(o.workers)};
    TrainerOptions t = o.train;
    t.metrics_path.clear();
    for (std::string& f : TrainerFlags(t))
      p.worker_args.push_back(std::move(f));
  }
  return p;
}

absl::Status SavePlan(const LocalPlan& p, const std::string& path) {
  const nlohmann::json j = {{"servers", p.servers},
                            {"workers", p.workers},
                            {"consistency", p.consistency},
                            {"snapshot_every", p.snapshot_every},
                            {"toy", p.toy},
                            {"tls", p.tls},
                            {"ram_budget", p.ram_budget},
                            {"tokenizer_dir", p.tokenizer_dir},
                            {"worker_args", p.worker_args}};
  return WriteFileSynced(path, j.dump(1) + "\n");
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
    p.consistency = j.at("consistency").get<std::string>();
    p.snapshot_every = j.at("snapshot_every").get<int64_t>();
    p.toy = j.at("toy").get<bool>();
    p.tls = j.value("tls", false);  // absent in runs before TLS
    p.ram_budget = j.value("ram_budget", uint64_t{0});  // and before tiers
    p.tokenizer_dir = j.value("tokenizer_dir", std::string());
    p.worker_args = j.at("worker_args").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, " is malformed: ", e.what()));
  }
  if (p.servers < 1 || p.workers < 1 || p.worker_args.empty())
    return absl::DataLossError(absl::StrCat(path, " is malformed"));
  return p;
}

// The step to resume the run in `dir` at: the newest every server holds a
// snapshot of, and not past the steps the ledger saw applied (a crash can
// lose the last reports; steps it never recorded must be computed again).
absl::StatusOr<int64_t> ResumeStep(const std::string& dir, int servers) {
  STRATA_ASSIGN_OR_RETURN(const int64_t applied,
                          ReadLedgerAppliedSteps(dir + "/scheduler"));
  STRATA_ASSIGN_OR_RETURN(auto dirs, OpenServerDirs(dir));
  if (static_cast<int>(dirs.size()) != servers) {
    return absl::DataLossError(absl::StrCat(dir, " has ", dirs.size(),
                                            " server directories; the run had ",
                                            servers));
  }
  absl::StatusOr<int64_t> step = NewestCommonSnapshot(dirs, applied);
  if (!step.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot resume ", dir, ": ", step.status().message(),
        " (a run resumes from its servers' snapshots: --snapshot_every)"));
  }
  return step;
}

// --tokenizer_dir (checked by loading it; --vocab follows it unless given)
// and --init_from (the model's shape follows the file unless given).
absl::Status ApplyTokenizerAndInit(const CLI::App& cmd, LocalOptions& o) {
  int tokenizer_vocab = 0;
  if (!o.tokenizer_dir.empty()) {
    o.tokenizer_dir = std::filesystem::absolute(o.tokenizer_dir).string();
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt2Tokenizer> tok,
                            LoadTokenizerIn(o.tokenizer_dir));
    if (tok == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(o.tokenizer_dir,
                       " holds neither vocab.json and merges.txt nor "
                       "encoder.json and vocab.bpe"));
    }
    tokenizer_vocab = tok->vocab_size();
    if (cmd.get_option("--vocab")->count() == 0)
      o.train.model.vocab = tokenizer_vocab;
  }
  STRATA_RETURN_IF_ERROR(ApplyInitFromShape(cmd, o.train));
  if (o.train.model.vocab < tokenizer_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer in ", o.tokenizer_dir, " has ", tokenizer_vocab,
        " ids: the model's vocab of ", o.train.model.vocab,
        " cannot hold them (leave --vocab out, or give at least ",
        tokenizer_vocab, ")"));
  }
  return absl::OkStatus();
}

int RunLocal(const LocalOptions& o, const std::string& resume_dir) {
  LocalPlan plan = PlanOf(o);
  int64_t resume_step = -1;
  if (!resume_dir.empty()) {
    absl::StatusOr<LocalPlan> loaded = LoadPlan(resume_dir + "/local.json");
    if (!loaded.ok()) return ReportStatus("local", loaded.status());
    plan = *std::move(loaded);
    if (absl::StatusOr<Consistency> c = ParseConsistency(plan.consistency);
        !c.ok() || c->mode != Consistency::kBsp) {
      return ReportStatus(
          "local", absl::FailedPreconditionError(absl::StrCat(
                       "cannot resume a '", plan.consistency,
                       "' run: only BSP servers take consistent snapshots")));
    }
    absl::StatusOr<int64_t> step = ResumeStep(resume_dir, plan.servers);
    if (!step.ok()) return ReportStatus("local", step.status());
    resume_step = *step;
  }
  if (resume_dir.empty() && !o.toy) {
    // Bad data or model flags are found here, not once every process of
    // the cluster has started.
    if (absl::Status s = CheckTrainerOptions(o.train); !s.ok())
      return ReportStatus("local", s);
  }
  if (resume_dir.empty() && !o.work_dir.empty() &&
      std::filesystem::exists(o.work_dir + "/local.json")) {
    // Its scheduler and servers would restore the old run's ledger and
    // snapshots under a new one.
    return ReportStatus(
        "local",
        absl::FailedPreconditionError(absl::StrCat(
            o.work_dir, " holds a run already: go on with it with --resume ",
            o.work_dir, ", or pick another --dir")));
  }
  return Launch(plan, resume_dir.empty() ? o.work_dir : resume_dir,
                resume_step);
}

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

int Launch(const LocalPlan& o, std::string dir, int64_t resume_step) {
  const absl::StatusOr<Consistency> consistency =
      ParseConsistency(o.consistency);
  if (!consistency.ok()) return ReportStatus("local", consistency.status());
  if (dir.empty()) {
    char tmpl[] = "/tmp/strata-local-XXXXXX";
    if (mkdtemp(tmpl) == nullptr)
      return ReportStatus("local", absl::InternalError("mkdtemp failed"));
    dir = tmpl;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return ReportStatus("local",
                        absl::FailedPreconditionError(absl::StrCat(
                            "cannot create the run's directory ", dir, ": ",
                            ec.message(), " (pick another --dir)")));
  }
  spdlog::info(
      "strata local: {} servers, {} workers, {}, state in {}{}", o.servers,
      o.workers, o.consistency, dir,
      resume_step >= 0 ? absl::StrCat("; resuming at step ", resume_step) : "");
  if (resume_step < 0) {
    // `strata generate` and `strata export` find the tokenizer here. Before
    // the plan: a run whose copy failed is not taken for one that started.
    if (std::optional<TokenizerFiles> files =
            FindTokenizerFiles(o.tokenizer_dir);
        files && !o.tokenizer_dir.empty()) {
      absl::Status s = CopyTokenizerFiles(*files, dir + "/tokenizer");
      if (!s.ok()) return ReportStatus("local", s);
    }
    if (absl::Status s = SavePlan(o, dir + "/local.json"); !s.ok())
      return ReportStatus("local", s);
  }
  const std::string address_file = dir + "/scheduler.address";
  std::filesystem::remove(address_file, ec);

  std::vector<pid_t> daemons;  // scheduler + servers, stopped at the end
  auto stop_all = [&daemons] {
    for (auto it = daemons.rbegin(); it != daemons.rend(); ++it)
      StopChild(*it, absl::Seconds(10));
    daemons.clear();
  };
  std::vector<std::string> scheduler_args = {"scheduler",
                                             "--listen",
                                             "127.0.0.1:0",
                                             "--num_shards",
                                             std::to_string(o.servers),
                                             "--consistency",
                                             o.consistency,
                                             "--data_dir",
                                             dir + "/scheduler",
                                             "--address_file",
                                             address_file,
                                             "--metrics_port",
                                             "0"};
  if (resume_step >= 0) {
    scheduler_args.insert(scheduler_args.end(),
                          {"--resume_step", std::to_string(resume_step)});
  }
  absl::StatusOr<std::vector<std::string>> tls[3];
  for (Role r : {Role::kScheduler, Role::kServer, Role::kWorker}) {
    tls[static_cast<int>(r)] = TlsArgs(o, dir, r);
    if (!tls[static_cast<int>(r)].ok())
      return ReportStatus("local", tls[static_cast<int>(r)].status());
  }
  auto with_tls = [&tls](std::vector<std::string>& args, Role r) {
    const std::vector<std::string>& t = *tls[static_cast<int>(r)];
    args.insert(args.end(), t.begin(), t.end());
  };
  with_tls(scheduler_args, Role::kScheduler);
  auto scheduler = SpawnSelf(scheduler_args);
  if (!scheduler.ok()) return ReportStatus("local", scheduler.status());
  daemons.push_back(*scheduler);
  auto address = WaitForFile(address_file, absl::Seconds(30));
  if (!address.ok()) {
    stop_all();
    return ReportStatus("local", address.status());
  }
  // Each server's command line, to start it again should it die.
  absl::flat_hash_map<pid_t, ServerProcess> servers;
  for (int s = 0; s < o.servers; ++s) {
    std::vector<std::string> args = {"server",
                                     "--scheduler",
                                     *address,
                                     "--shard",
                                     std::to_string(s),
                                     "--data_dir",
                                     absl::StrCat(dir, "/server-", s),
                                     "--snapshot_every",
                                     std::to_string(o.snapshot_every),
                                     "--metrics_port",
                                     "0"};
    if (resume_step >= 0) {
      args.insert(args.end(), {"--restore_step", std::to_string(resume_step)});
    }
    if (o.ram_budget > 0) {
      args.insert(args.end(), {"--ram_budget", std::to_string(o.ram_budget)});
    }
    with_tls(args, Role::kServer);
    auto pid = SpawnSelf(args);
    if (!pid.ok()) {
      stop_all();
      return ReportStatus("local", pid.status());
    }
    daemons.push_back(*pid);
    servers[*pid] = ServerProcess{s, std::move(args)};
  }
  std::vector<pid_t> workers;
  for (int w = 0; w < o.workers; ++w) {
    std::vector<std::string> args = o.worker_args;
    args.insert(args.begin() + 1, {"--scheduler", *address});
    if (o.toy) {
      args.insert(args.end(), {"--out", dir + "/weights.f32"});
    } else {
      // Health and metrics on free ports: `strata status` finds them in
      // the view.
      args.insert(args.end(),
                  {"--model_json", dir + "/model.json", "--metrics",
                   absl::StrCat(dir, "/metrics-", w, ".jsonl"), "--listen",
                   "127.0.0.1:0", "--metrics_port", "0"});
    }
    with_tls(args, Role::kWorker);
    auto pid = SpawnSelf(args);
    if (!pid.ok()) {
      stop_all();
      return ReportStatus("local", pid.status());
    }
    workers.push_back(*pid);
  }
  // Ctrl-C (or SIGTERM): on a terminal the children got SIGINT too; either
  // way stop the workers, then the servers and the scheduler below.
  static std::atomic<bool> interrupted{false};
  OnShutdownSignal([workers] {
    interrupted = true;
    spdlog::warn("strata local: interrupted; stopping the cluster");
    for (pid_t w : workers) kill(w, SIGTERM);
  });
  const WorkersEnd end =
      SuperviseUntilWorkersEnd(workers, servers, daemons, interrupted,
                               consistency->mode == Consistency::kBsp);
  stop_all();
  if (interrupted) {
    spdlog::info(
        "strata local: stopped; state in {} (go on with: strata local "
        "--resume {})",
        dir, dir);
    return 130;
  }
  if (!end.stopped_because.empty()) {
    spdlog::error(
        "strata local: stopped: {}; state in {} (go on with: strata local "
        "--resume {})",
        end.stopped_because, dir, dir);
    return 1;
  }
  if (end.failed > 0) {
    spdlog::error("strata local: {} worker(s) failed", end.failed);
    return 1;
  }
  spdlog::info("strata local: done; snapshots and metrics in {}", dir);
  if (!o.toy) {
    absl::StatusOr<std::string> plot = PlotRun(dir, "");
    if (plot.ok()) {
      spdlog::info("strata local: curves in {}", *plot);
    } else {
      spdlog::warn("strata local: no plot: {}", plot.status().ToString());
    }
    spdlog::info(
        "strata local: sample from the model with: strata generate --dir {}",
        dir);
  }
  return 0;
}

}  // namespace

CommandFn AddLocalCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "local",
      "Run a scheduler, servers and workers on this machine and train");
  auto o = std::make_shared<LocalOptions>();
  cmd->add_option("--servers", o->servers, "parameter-server processes")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--workers", o->workers, "worker processes")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--consistency", o->consistency, "bsp | ssp:<s> | asp")
      ->capture_default_str();
  cmd->add_option(
      "--dir", o->work_dir,
      "working directory for state and snapshots (default: a new temp dir)");
  cmd->add_flag("--toy", o->toy,
                "train the least-squares push/pull demo instead of a GPT");
  cmd->add_flag("--tls", o->tls,
                "mutual TLS on every channel, as a cluster runs, with a CA "
                "and per-role certificates made in <dir>/certs");
  AddTrainerFlags(cmd, &o->train);
  cmd->add_option("--tokenizer_dir", o->tokenizer_dir,
                  "a folder with GPT-2's tokenizer (vocab.json and merges.txt, "
                  "or GPT-2's encoder.json and vocab.bpe) for data in GPT-2 "
                  "tokens: --vocab follows it (50257) unless given, and "
                  "`strata generate` and `strata export` use it")
      ->check(CLI::ExistingDirectory);
  // Each worker writes <dir>/metrics-N.jsonl: a --metrics file would be
  // ignored, so it is not taken.
  cmd->remove_option(cmd->get_option("--metrics"));
  AddRamBudgetFlag(cmd, &o->ram_budget);
  cmd->add_option("--snapshot_every", o->snapshot_every,
                  "snapshot every N steps (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  auto resume = std::make_shared<std::string>();
  cmd->add_option("--resume", *resume,
                  "go on with the stopped or crashed run in this directory, "
                  "from the newest step all its servers hold a snapshot of, "
                  "with the settings it was started with")
      ->check(CLI::ExistingDirectory);
  return [o, resume, cmd] {
    if (!resume->empty()) {
      // The run's own settings apply; another one given here would be
      // silently ignored, so refuse it.
      for (const CLI::Option* opt : cmd->get_options()) {
        if (opt->count() > 0 && opt->get_name() != "--resume" &&
            opt->get_name() != "--help") {
          return ReportStatus(
              "local", absl::InvalidArgumentError(absl::StrCat(
                           opt->get_name(),
                           " cannot be combined with --resume: a run resumes "
                           "with the settings it was started with")));
        }
      }
    }
    if (resume->empty()) {
      if (absl::Status s = ApplyTokenizerAndInit(*cmd, *o); !s.ok())
        return ReportStatus("local", s);
    }
    return RunLocal(*o, *resume);
  };
}

}  // namespace strata
