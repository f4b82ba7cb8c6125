// `strata local`: a whole cluster on this machine, as separate processes.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/process.h"
#include "cli/signals.h"
#include "common/consistency.h"
#include "spdlog/spdlog.h"

namespace strata {
namespace {

struct LocalOptions {
  int servers = 2;
  int workers = 2;
  std::string consistency = "bsp";
  std::string work_dir;  // "" = a fresh /tmp/strata-local-XXXXXX
  int64_t snapshot_every = 100;
  bool toy = false;  // least-squares demo instead of a GPT
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

int RunLocal(const LocalOptions& o) {
  if (auto c = ParseConsistency(o.consistency); !c.ok())
    return ReportStatus("local", c.status());
  std::string dir = o.work_dir;
  if (dir.empty()) {
    char tmpl[] = "/tmp/strata-local-XXXXXX";
    if (mkdtemp(tmpl) == nullptr)
      return ReportStatus("local", absl::InternalError("mkdtemp failed"));
    dir = tmpl;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  spdlog::info("strata local: {} servers, {} workers, {}, state in {}",
               o.servers, o.workers, o.consistency, dir);
  const std::string address_file = dir + "/scheduler.address";
  std::filesystem::remove(address_file, ec);

  std::vector<pid_t> daemons;  // scheduler + servers, stopped at the end
  auto stop_all = [&daemons] {
    for (auto it = daemons.rbegin(); it != daemons.rend(); ++it)
      StopChild(*it, absl::Seconds(10));
    daemons.clear();
  };
  auto scheduler = SpawnSelf(
      {"scheduler", "--listen", "127.0.0.1:0", "--num_shards",
       std::to_string(o.servers), "--consistency", o.consistency, "--data_dir",
       dir + "/scheduler", "--address_file", address_file});
  if (!scheduler.ok()) return ReportStatus("local", scheduler.status());
  daemons.push_back(*scheduler);
  auto address = WaitForFile(address_file, absl::Seconds(30));
  if (!address.ok()) {
    stop_all();
    return ReportStatus("local", address.status());
  }
  for (int s = 0; s < o.servers; ++s) {
    auto pid = SpawnSelf({"server", "--scheduler", *address, "--shard",
                          std::to_string(s), "--data_dir",
                          absl::StrCat(dir, "/server-", s), "--snapshot_every",
                          std::to_string(o.snapshot_every)});
    if (!pid.ok()) {
      stop_all();
      return ReportStatus("local", pid.status());
    }
    daemons.push_back(*pid);
  }
  std::vector<pid_t> workers;
  for (int w = 0; w < o.workers; ++w) {
    std::vector<std::string> args;
    if (o.toy) {
      args = {"toy",
              "--scheduler",
              *address,
              "--workers",
              std::to_string(o.workers),
              "--steps",
              std::to_string(o.train.steps),
              "--out",
              dir + "/weights.f32"};
    } else {
      args = {"worker",
              "--scheduler",
              *address,
              "--workers",
              std::to_string(o.workers),
              "--model_json",
              dir + "/model.json"};
      TrainerOptions t = o.train;
      t.metrics_path = absl::StrCat(dir, "/metrics-", w, ".jsonl");
      for (std::string& f : TrainerFlags(t)) args.push_back(std::move(f));
    }
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
  int failed = 0;
  for (pid_t w : workers) failed += WaitChild(w) != 0;
  stop_all();
  if (interrupted) {
    spdlog::info("strata local: stopped; state in {}", dir);
    return 130;
  }
  if (failed > 0) {
    spdlog::error("strata local: {} worker(s) failed", failed);
    return 1;
  }
  spdlog::info("strata local: done; snapshots and metrics in {}", dir);
  if (!o.toy) {
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
  AddTrainerFlags(cmd, &o->train);
  cmd->add_option("--snapshot_every", o->snapshot_every,
                  "snapshot every N steps (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  return [o] { return RunLocal(*o); };
}

}  // namespace strata
