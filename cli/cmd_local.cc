// `strata local`: a whole cluster on this machine, as separate processes.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/local_launch.h"
#include "cli/model_files.h"
#include "cli/ops.h"
#include "common/consistency.h"
#include "common/status.h"
#include "scheduler/ledger_audit.h"
#include "scheduler/scheduler.h"
#include "spdlog/spdlog.h"
#include "storage/server_dirs.h"

namespace strata {
namespace {

struct LocalOptions {
  int servers = 2;
  int replicas = 1;
  int workers = 2;
  std::string consistency = "bsp";
  std::string work_dir;  // "" = a fresh /tmp/strata-local-XXXXXX
  int64_t snapshot_every = 100;
  bool toy = false;         // least-squares demo instead of a GPT
  bool tls = false;         // mutual TLS on every channel, certificates in dir
  uint64_t ram_budget = 0;  // per server; 0 = everything in RAM
  // GPT-2 tokenizer files, copied into <dir>/tokenizer/ ("": bytes).
  std::string tokenizer_dir;
  // The worker that alone gets --slowdown, --jitter and --slowdown_steps
  // (-1: every worker does).
  int straggler = -1;
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

LocalPlan PlanOf(const LocalOptions& o) {
  LocalPlan p;
  p.servers = o.servers;
  p.replicas = o.replicas;
  p.workers = o.workers;
  p.consistency = o.consistency;
  p.snapshot_every = o.snapshot_every;
  p.toy = o.toy;
  p.tls = o.tls;
  p.ram_budget = o.ram_budget;
  p.tokenizer_dir = o.tokenizer_dir;
  if (o.toy) {
    p.worker_args = {"toy", "--workers", std::to_string(o.workers), "--steps",
                     std::to_string(o.train.steps)};
  } else {
    p.worker_args = {"worker", "--workers", std::to_string(o.workers)};
    TrainerOptions t = o.train;
    t.metrics_path.clear();
    if (o.straggler >= 0) {
      // The straggler's flags go to it alone.
      const TrainerOptions plain;
      p.straggler = o.straggler;
      p.straggler_args = StragglerFlags(t);
      t.slowdown = plain.slowdown;
      t.jitter = plain.jitter;
      t.slowdown_from = plain.slowdown_from;
      t.slowdown_until = plain.slowdown_until;
    }
    for (std::string& f : TrainerFlags(t))
      p.worker_args.push_back(std::move(f));
  }
  return p;
}

// The step to resume the run in `dir` at: the newest of which every slot
// holds a snapshot (in one of its replicas' directories at least: a
// replica that died long before the stop may hold only older ones), and
// not past the steps the ledger saw applied (a crash can lose the last
// reports; steps it never recorded must be computed again).
absl::StatusOr<int64_t> ResumeStep(const std::string& dir, int servers,
                                   int replicas) {
  STRATA_ASSIGN_OR_RETURN(const int64_t applied,
                          ReadLedgerAppliedSteps(dir + "/scheduler"));
  std::vector<std::string> slots(servers);
  std::vector<std::vector<int64_t>> held(servers);
  for (int r = 0; r < replicas; ++r) {
    const std::string set = r == 0 ? dir : absl::StrCat(dir, "/replica-", r);
    STRATA_ASSIGN_OR_RETURN(auto dirs, OpenServerDirs(set));
    if (static_cast<int>(dirs.size()) != servers) {
      return absl::DataLossError(
          absl::StrCat(set, " has ", dirs.size(),
                       " server directories; the run had ", servers));
    }
    for (int s = 0; s < servers; ++s) {
      slots[s] = absl::StrCat(dir, "/server-", s, " (and its replicas)");
      STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> steps,
                              dirs[s]->ListSnapshots());
      held[s].insert(held[s].end(), steps.begin(), steps.end());
    }
  }
  for (std::vector<int64_t>& h : held) {
    std::sort(h.begin(), h.end());
    h.erase(std::unique(h.begin(), h.end()), h.end());
  }
  absl::StatusOr<int64_t> step = NewestCommonStep(slots, held, applied);
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
  if (o.straggler >= o.workers) {
    return ReportStatus("local", absl::InvalidArgumentError(absl::StrCat(
                                     "--straggler ", o.straggler,
                                     " names no worker (--workers ", o.workers,
                                     ": 0 to ", o.workers - 1, ")")));
  }
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
    absl::StatusOr<int64_t> step =
        ResumeStep(resume_dir, plan.servers, plan.replicas);
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

}  // namespace

CommandFn AddLocalCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "local",
      "Run a scheduler, servers and workers on this machine and train");
  auto o = std::make_shared<LocalOptions>();
  cmd->add_option("--servers", o->servers,
                  "shard slots, each served by --replicas server processes")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--replicas", o->replicas,
                  "servers per slot: a primary and its backups; one killed, "
                  "the job goes on with no rollback")
      ->check(CLI::Range(1, kMaxReplicas))
      ->capture_default_str();
  cmd->add_option("--workers", o->workers, "worker processes")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--consistency", o->consistency,
                  "bsp | ssp:<s> | asp | auto[:<max_staleness>[:ssp]] (auto: "
                  "start in bsp, switch live by the measured step times; "
                  ":ssp: never to asp)")
      ->capture_default_str();
  cmd->add_option("--straggler", o->straggler,
                  "worker K (0-based) alone takes --slowdown, --jitter and "
                  "--slowdown_steps (-1: every worker does)")
      ->check(CLI::Range(-1, 63))
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
      ->check(NonNegativeNumber())
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
