// `strata worker` and the trainer's flags (`strata local` takes them too).
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "cli/ops.h"
#include "cli/signals.h"
#include "common/metrics.h"
#include "common/status.h"
#include "model/gpt.h"
#include "model/hf_gpt2.h"
#include "rpc/health.h"
#include "spdlog/spdlog.h"
#include "trainer/server_model.h"
#include "trainer/trainer.h"

namespace strata {
namespace {

// `strata worker`: the trainer with its health server and metrics endpoint.
// SIGTERM or Ctrl-C makes it leave the job after the step under way (a
// second signal exits at once).
absl::Status RunWorker(TrainerOptions o, const std::string& listen,
                       const std::string& address_file,
                       const MetricsFlags& metrics_flags, const TlsFlags& tls) {
  std::vector<std::string> listens;
  if (!listen.empty()) listens.push_back(listen);
  STRATA_ASSIGN_OR_RETURN(o.security,
                          LoadSecurity(tls, Role::kWorker, listens));
  // Shared with the signal thread, which may outlive this call.
  std::shared_ptr<HealthServer> health;
  if (!listen.empty()) {
    STRATA_ASSIGN_OR_RETURN(health, HealthServer::Start(listen, *o.security));
    if (o.advertise_address.empty()) {
      o.advertise_address =
          DialableAddress(listen.substr(0, listen.rfind(':')), health->port());
    }
    STRATA_RETURN_IF_ERROR(WriteAddressFile(address_file, o.advertise_address));
  } else if (!address_file.empty()) {
    return absl::InvalidArgumentError(
        "--address_file names where the health address goes: it needs "
        "--listen");
  }
  Metrics metrics;
  AddProcessMetrics(metrics, "");
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<MetricsEndpoint> endpoint,
                          BindMetrics(metrics_flags, "worker"));
  if (endpoint) endpoint->Serve(&metrics);
  o.metrics = &metrics;
  o.metrics_address =
      MetricsAddress(endpoint.get(), metrics_flags, o.advertise_address);
  HealthServer* h = health.get();
  o.on_joined = [h] {
    if (h != nullptr) h->SetServing(true);
  };
  auto stop = std::make_shared<std::atomic<bool>>(false);
  o.stop = stop.get();
  OnShutdownSignal([stop, health] {
    spdlog::info("strata worker: stopping after this step (again: at once)");
    if (health) health->SetServing(false);
    stop->store(true);
  });
  return RunTrainer(o);
}

}  // namespace

void AddModelFlags(CLI::App* cmd, GptConfig* m) {
  cmd->add_option("--layers", m->layers, "transformer blocks")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--heads", m->heads, "attention heads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--width", m->width, "model width (channels)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--context", m->context, "context length in tokens")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--vocab", m->vocab,
                  "vocabulary size (256 for byte-level text)")
      ->check(CLI::Range(2, 1 << 16))
      ->capture_default_str();
  cmd->add_flag("--recompute", m->recompute,
                "recompute activations per block in backward (less memory)");
  cmd->add_option("--experts", m->experts,
                  "mixture of experts: this many expert MLPs in every "
                  "--moe_every-th block (0: a dense model)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_option("--top_k", m->top_k,
                  "experts a token is routed to: 1 (Switch) or 2 (GShard)")
      ->check(CLI::Range(1, 2))
      ->capture_default_str();
  cmd->add_option("--moe_every", m->moe_every,
                  "with --experts, blocks K-1, 2K-1, ... are MoE blocks")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--expert_hidden", m->expert_hidden,
                  "with --experts, each expert MLP's features (0: 4 x "
                  "--width, the dense MLP's)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--capacity", m->capacity,
                  "with --experts, the capacity factor: each expert takes "
                  "ceil(F * top_k * tokens / experts) tokens, the rest pass "
                  "through the residual")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--aux_loss", m->aux_loss,
                  "with --experts, the load-balancing loss's weight")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

void AddTrainerFlags(CLI::App* cmd, TrainerOptions* o) {
  AddModelFlags(cmd, &o->model);
  // Names on the command line, enums in the options (checked first, so
  // the parse cannot fail).
  cmd->add_option_function<std::string>(
         "--device",
         [o](const std::string& name) { o->device = *ParseDevice(name); },
         "cpu, or cuda (bf16 on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->default_str(DeviceName(o->device));
  cmd->add_option("--data", o->data_path,
                  "text file or folder (byte-level), or a token shard")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch,
                  "global batch in sequences, split over workers")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "training steps")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "data order and initialization seed")
      ->capture_default_str();
  cmd->add_option("--init_from", o->init_from,
                  "start from the weights in this safetensors file in Hugging "
                  "Face's GPT-2 layout (e.g. GPT-2's model.safetensors; "
                  "`strata export` writes them): the model's shape comes "
                  "from it and the config.json beside it unless given; the "
                  "servers read the file at this path")
      ->check(CLI::ExistingFile);
  cmd->add_option("--optimizer", o->optimizer,
                  "the servers' optimizer: adamw, adam, sgd (momentum 0.9), "
                  "lamb (norms over whole tensors; SSP/ASP: per chunk) or "
                  "adafactor (factored, update clipping, the scheduled lr)")
      ->check(CLI::IsMember({"adamw", "adam", "sgd", "lamb", "adafactor"}))
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "peak learning rate")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--async_lr", o->async_lr_share,
                  "SSP/ASP: each push's learning rate: 'share' (times the "
                  "worker's share of the step's batch, so a step moves the "
                  "weights about as far as a BSP update) or 'full'")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, bool>{{"share", true}, {"full", false}}))
      ->option_text("full|share (default: full)");
  cmd->add_option("--weight_decay", o->weight_decay,
                  "weight decay of matrices (decoupled but for adam and sgd)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup_steps, "learning-rate warm-up steps")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--grad_clip", o->grad_clip,
                  "clip gradients to this global norm (0: off)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  AddByteSizeFlag(cmd, "--chunk_size", &o->chunk_bytes,
                  "largest piece of a tensor the servers hold as one chunk, "
                  "e.g. 4MiB (each server's --ram_budget must hold one "
                  "chunk's weights and optimizer state)",
                  [](uint64_t b) -> std::string {
                    return b < 4 || b > (256ull << 20)
                               ? "a chunk size must be between 4 bytes and "
                                 "256MiB"
                               : "";
                  });
  cmd->add_option("--micro_batches", o->micro_batches,
                  "compute each worker's share of a step in this many "
                  "micro-batches, accumulated and pushed once (the global "
                  "--batch stays as set); with --pp > 1, the pipeline's "
                  "micro-batches")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--tp", o->tp,
                  "tensor-parallel ranks inside each worker (Megatron 1D: "
                  "attention split by heads, the MLP by hidden features, "
                  "embedding and LM head by vocabulary; CPU threads only)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--pp", o->pp,
                  "pipeline stages inside each worker (the blocks split "
                  "into stages, --micro_batches run 1F1B; at most --layers; "
                  "CPU threads only)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--ep", o->ep,
                  "expert-parallel ranks inside each worker (with --experts, "
                  "which it must divide): each rank runs the dense layers "
                  "on its share of the worker's sequences and experts/ep "
                  "of every MoE layer's experts, tokens sent to their "
                  "experts and back by all-to-all; CPU threads only")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--overlap_clip", o->overlap_clip,
                  "with --grad_clip, push gradients while backward runs and "
                  "send the clipping factor after it (the servers hold them "
                  "until then; the same update, up to rounding with "
                  "--push_bf16); false: clip, then push")
      ->capture_default_str();
  cmd->add_option("--pull_during_commit", o->pull_during_commit,
                  "BSP with --overlap_clip: pull the next step's weights "
                  "while the servers apply the clipping commit (false: wait "
                  "for its answer first)")
      ->capture_default_str();
  cmd->add_option("--lease_ahead_s", o->lease_ahead_s,
                  "lease steps ahead to train through a scheduler outage "
                  "this long (0: lease each step as it comes; BSP shares "
                  "follow a speed change this much later)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--forward_during_pull", o->forward_during_pull,
                  "start forward while the step's weights are being pulled, "
                  "each layer once its weights are in (--sync ps; false: "
                  "pull them all first)")
      ->capture_default_str();
  cmd->add_option("--slowdown", o->slowdown,
                  "simulate a straggler: each step computes this many times "
                  "as long (the worker sleeps the rest; its reported speed "
                  "includes it)")
      ->capture_default_str();
  cmd->add_option("--jitter", o->jitter,
                  "simulate a jittering worker: each step's time also times "
                  "a factor drawn from [1 - J, 1 + J]")
      ->capture_default_str();
  cmd->add_option_function<std::string>(
      "--slowdown_steps",
      [o](const std::string& text) {
        const std::vector<std::string> parts = absl::StrSplit(text, ':');
        int64_t from = 0, until = -1;
        if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &from) ||
            !absl::SimpleAtoi(parts[1], &until)) {
          throw CLI::ValidationError("--slowdown_steps",
                                     "A:B (steps [A, B); B = -1: to the end)");
        }
        o->slowdown_from = from;
        o->slowdown_until = until;
      },
      "the steps --slowdown and --jitter act on: A:B, [A, B) (-1: to the "
      "end; default all)");
  cmd->add_option("--waits_idle", o->waits_idle,
                  "a CPU worker counts its waits for weights as idle cores "
                  "(cores of its own that the host's or its CPU quota's "
                  "counts do not show); false: idle in their measured idle "
                  "share, as other processes may use them (--consistency "
                  "auto weighs it)")
      ->capture_default_str();
  cmd->add_option("--sparse_experts", o->sparse_experts,
                  "with --experts and --sync ps: pull and push only the "
                  "experts a step's tokens are routed to (an expert no "
                  "token reached keeps its weights and optimizer state); "
                  "false: every expert every step, as dense tensors")
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--sync",
         [o](const std::string& name) { o->sync = *ParseSyncMode(name); },
         "how workers combine gradients: ps (each pushes its own; "
         "the servers average them) or allreduce (BSP only: the "
         "workers all-reduce them over Gloo, overlapped with "
         "backward, and each pushes its share of the chunks)")
      ->check(CLI::IsMember({"ps", "allreduce"}))
      ->default_str(SyncModeName(o->sync));
  AddByteSizeFlag(cmd, "--bucket_size", &o->bucket_bytes,
                  "with --sync allreduce: all-reduce gradients in buckets of "
                  "about this size as backward finishes them, e.g. 25MiB (0: "
                  "one all-reduce per tensor)",
                  [](uint64_t b) -> std::string {
                    return b > (uint64_t{1} << 30) ? "a bucket is at most 1GiB"
                                                   : "";
                  });
  cmd->add_option("--collective_host", o->collective_host,
                  "with --sync allreduce: the address of this host the "
                  "other workers reach this worker's Gloo connections at")
      ->capture_default_str();
  cmd->add_flag_function(
      "--push_bf16", [o](int64_t n) { o->push_bf16 = n > 0; },
      "push gradients as bf16 (default with --device cuda: in messages to "
      "servers on other hosts, fp32 through shared memory; "
      "--push_bf16=false turns it off)");
  cmd->add_option("--error_feedback", o->error_feedback,
                  "with --push_bf16: carry each push's rounding error into "
                  "the next one (error feedback), so small gradient parts "
                  "are delayed, not lost")
      ->capture_default_str();
  cmd->add_option("--compress", o->compress,
                  "push gradients compressed, with error feedback: none, "
                  "onebit (signs and a bf16 scale per 64 elements) or "
                  "topk:R (the largest R of each chunk's elements)")
      ->check([](const std::string& s) {
        absl::StatusOr<PushCompression> c = ParseCompression(s);
        return c.ok() ? std::string() : std::string(c.status().message());
      })
      ->capture_default_str();
  cmd->add_option("--compress_from", o->compress_from,
                  "the first step pushed compressed (-1: after --warmup)")
      ->capture_default_str();
  cmd->add_option("--compress_freeze_variance", o->compress_freeze_variance,
                  "with --compress onebit and --optimizer adam, adamw or "
                  "lamb, freeze the second moment from --compress_from on, "
                  "as 1-bit Adam and 1-bit LAMB do")
      ->capture_default_str();
  cmd->add_option("--momentum_correction", o->momentum_correction,
                  "with --compress topk:R and --optimizer sgd, DGC's "
                  "momentum correction: the momentum kept on the worker, "
                  "compressed from step 0")
      ->capture_default_str();
  cmd->add_option("--compress_pulls", o->compress_pulls,
                  "with --compress, pull the weights compressed the same "
                  "way too: deltas against the worker's copy, the error "
                  "kept on the servers")
      ->capture_default_str();
  cmd->add_flag_function(
      "--pull_bf16", [o](int64_t n) { o->pull_bf16 = n > 0; },
      "pull weights as bf16 (the servers keep fp32; the worker computes "
      "with the rounded weights, as a GPU worker does anyway). Default with "
      "--device cuda: in messages to servers on other hosts, fp32 through "
      "shared memory; --pull_bf16=false turns it off");
  cmd->add_option("--shm", o->shared_memory,
                  "carry payloads through shared memory to servers on this "
                  "host (false: in gRPC messages)")
      ->capture_default_str();
  cmd->add_option_function<uint64_t>(
         "--batch_kib", [o](uint64_t kib) { o->batch_bytes = kib << 10; },
         "pushes and pulls of chunks under this many KiB (of up to 4 MiB in "
         "place in shared memory) share calls to a server when they queue "
         "for it (0: a call each)")
      ->default_str(std::to_string(TrainerOptions().batch_bytes >> 10))
      ->check(CLI::Range(uint64_t{0}, uint64_t{4096}));
  AddWireFlags(cmd, &o->wire, &o->bulk_insecure,
               "how payloads travel to servers shared memory does not reach: "
               "grpc (in messages; the default), ucx (on the bulk plane, UCX: "
               "an error where a server does not offer it), auto (ucx where "
               "both ends have it)");
  cmd->add_option("--eval_every", o->eval_every,
                  "evaluate held-out loss every N steps (0: never)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--log_every", o->log_every,
                  "progress line every N steps when not on a terminal")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--metrics", o->metrics_path,
                  "append JSON-lines metrics here");
}

std::vector<std::string> StragglerFlags(const TrainerOptions& o) {
  std::vector<std::string> f;
  if (o.slowdown != 1)
    f.insert(f.end(), {"--slowdown", absl::StrCat(o.slowdown)});
  if (o.jitter != 0) f.insert(f.end(), {"--jitter", absl::StrCat(o.jitter)});
  if (o.slowdown_from != 0 || o.slowdown_until != -1) {
    f.insert(f.end(), {"--slowdown_steps",
                       absl::StrCat(o.slowdown_from, ":", o.slowdown_until)});
  }
  return f;
}

std::vector<std::string> TrainerFlags(const TrainerOptions& o) {
  std::vector<std::string> f = {
      "--layers",       std::to_string(o.model.layers),
      "--heads",        std::to_string(o.model.heads),
      "--width",        std::to_string(o.model.width),
      "--context",      std::to_string(o.model.context),
      "--vocab",        std::to_string(o.model.vocab),
      "--data",         o.data_path,
      "--batch",        std::to_string(o.batch),
      "--steps",        std::to_string(o.steps),
      "--seed",         std::to_string(o.seed),
      "--optimizer",    o.optimizer,
      "--lr",           absl::StrCat(o.lr),
      "--weight_decay", absl::StrCat(o.weight_decay),
      "--warmup",       std::to_string(o.warmup_steps),
      "--grad_clip",    absl::StrCat(o.grad_clip),
      "--eval_every",   std::to_string(o.eval_every),
      "--log_every",    std::to_string(o.log_every)};
  if (o.async_lr_share) f.insert(f.end(), {"--async_lr", "share"});
  if (o.model.recompute) f.push_back("--recompute");
  if (o.model.experts > 0) {
    f.insert(f.end(), {"--experts", std::to_string(o.model.experts), "--top_k",
                       std::to_string(o.model.top_k), "--moe_every",
                       std::to_string(o.model.moe_every), "--expert_hidden",
                       std::to_string(o.model.expert_hidden), "--capacity",
                       absl::StrCat(o.model.capacity), "--aux_loss",
                       absl::StrCat(o.model.aux_loss)});
  }
  if (!o.init_from.empty()) f.insert(f.end(), {"--init_from", o.init_from});
  f.insert(f.end(), {"--device", DeviceName(o.device)});
  // Set or not: a worker's own default follows its device.
  if (o.push_bf16)
    f.push_back(*o.push_bf16 ? "--push_bf16" : "--push_bf16=false");
  if (o.pull_bf16)
    f.push_back(*o.pull_bf16 ? "--pull_bf16" : "--pull_bf16=false");
  if (!o.error_feedback) f.insert(f.end(), {"--error_feedback", "false"});
  if (o.compress != "none") {
    f.insert(
        f.end(),
        {"--compress", o.compress, "--compress_from",
         std::to_string(o.compress_from), "--compress_pulls",
         o.compress_pulls ? "true" : "false", "--compress_freeze_variance",
         o.compress_freeze_variance ? "true" : "false", "--momentum_correction",
         o.momentum_correction ? "true" : "false"});
  }
  if (o.micro_batches != 1)
    f.insert(f.end(), {"--micro_batches", std::to_string(o.micro_batches)});
  if (o.tp != 1) f.insert(f.end(), {"--tp", std::to_string(o.tp)});
  if (o.pp != 1) f.insert(f.end(), {"--pp", std::to_string(o.pp)});
  if (o.ep != 1) f.insert(f.end(), {"--ep", std::to_string(o.ep)});
  if (o.chunk_bytes != TrainerOptions().chunk_bytes)
    f.insert(f.end(), {"--chunk_size", std::to_string(o.chunk_bytes)});
  if (!o.overlap_clip) f.insert(f.end(), {"--overlap_clip", "false"});
  if (!o.pull_during_commit)
    f.insert(f.end(), {"--pull_during_commit", "false"});
  if (!o.forward_during_pull)
    f.insert(f.end(), {"--forward_during_pull", "false"});
  if (!o.sparse_experts) f.insert(f.end(), {"--sparse_experts", "false"});
  if (o.waits_idle) f.insert(f.end(), {"--waits_idle", "true"});
  for (std::string& s : StragglerFlags(o)) f.push_back(std::move(s));
  if (o.lease_ahead_s != TrainerOptions().lease_ahead_s)
    f.insert(f.end(), {"--lease_ahead_s", absl::StrCat(o.lease_ahead_s)});
  if (o.sync != SyncMode::kPs)
    f.insert(f.end(), {"--sync", SyncModeName(o.sync)});
  if (o.bucket_bytes != TrainerOptions().bucket_bytes)
    f.insert(f.end(), {"--bucket_size", std::to_string(o.bucket_bytes)});
  if (o.collective_host != TrainerOptions().collective_host)
    f.insert(f.end(), {"--collective_host", o.collective_host});
  if (!o.shared_memory) f.insert(f.end(), {"--shm", "false"});
  if (o.batch_bytes != TrainerOptions().batch_bytes)
    f.insert(f.end(), {"--batch_kib", std::to_string(o.batch_bytes >> 10)});
  if (o.wire != WireKind::kGrpc)
    f.insert(f.end(), {"--wire", WireKindName(o.wire)});
  if (o.bulk_insecure) f.insert(f.end(), {"--bulk_insecure", "true"});
  if (!o.metrics_path.empty()) f.insert(f.end(), {"--metrics", o.metrics_path});
  return f;
}

absl::Status ApplyInitFromShape(const CLI::App& cmd, TrainerOptions& o) {
  if (o.init_from.empty()) return absl::OkStatus();
  // The servers open it too, from wherever they run.
  o.init_from = std::filesystem::absolute(o.init_from).string();
  auto unset = [&cmd](const char* flag) {
    return cmd.get_option(flag)->count() == 0;
  };
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                          SafetensorsFile::Open(o.init_from));
  STRATA_ASSIGN_OR_RETURN(
      GptConfig c, HfModelConfig(*file, unset("--heads") ? 0 : o.model.heads));
  if (unset("--layers")) o.model.layers = c.layers;
  if (unset("--width")) o.model.width = c.width;
  if (unset("--context")) o.model.context = c.context;
  if (unset("--vocab")) o.model.vocab = c.vocab;
  if (unset("--heads")) o.model.heads = c.heads;
  return absl::OkStatus();
}

CommandFn AddWorkerCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "worker", "Train a GPT through the parameter servers (one worker)");
  auto o = std::make_shared<TrainerOptions>();
  cmd->add_option("--scheduler", o->scheduler_address, "scheduler host:port")
      ->required()
      ->check(DialAddress());
  cmd->add_option("--workers", o->workers,
                  "start once this many workers are live")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  AddTrainerFlags(cmd, o.get());
  cmd->add_option(
      "--model_json", o->model_json_path,
      "write the model config here at the start (for `strata generate` "
      "and `strata export`)");
  cmd->add_option("--weights_out", o->weights_out,
                  "rank 0 writes the final weights here (raw fp32)");
  auto listen = std::make_shared<std::string>();
  auto address_file = std::make_shared<std::string>();
  auto metrics = std::make_shared<MetricsFlags>();
  cmd->add_option("--listen", *listen,
                  "host:port to serve gRPC health on (SERVING once joined; "
                  "unset: none)");
  cmd->add_option("--advertise", o->advertise_address,
                  "health address others dial (default: 127.0.0.1:<port>)");
  cmd->add_option("--address_file", *address_file,
                  "write the health address here once serving (with --listen)");
  auto tls = std::make_shared<TlsFlags>();
  AddMetricsFlags(cmd, metrics.get());
  AddTlsFlags(cmd, tls.get(), /*listens=*/true);
  return [o, listen, address_file, metrics, tls, cmd] {
    if (absl::Status s = ApplyInitFromShape(*cmd, *o); !s.ok())
      return ReportStatus("worker", s);
    return ReportStatus("worker",
                        RunWorker(*o, *listen, *address_file, *metrics, *tls));
  };
}

}  // namespace strata
