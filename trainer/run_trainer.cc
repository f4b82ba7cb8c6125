// RunTrainer's setup: checks the options, builds the model and opens the
// data (before joining anything), joins the job and declares the model to
// the servers; then trainer/trainer.cc's step loop runs.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "cluster/worker_session.h"
#include "common/shm_region.h"
#include "common/status.h"
#include "data/dataset.h"
#include "model/gpt.h"
#include "model/gpt_config_json.h"
#include "spdlog/spdlog.h"
#include "trainer/server_model.h"
#include "trainer/trainer.h"
#include "trainer/trainer_loop.h"

namespace strata {
namespace {

absl::Status Validate(const TrainerOptions& o) {
  STRATA_RETURN_IF_ERROR(o.model.Validate());
  if (o.workers < 1)
    return absl::InvalidArgumentError("--workers must be >= 1");
  if (o.batch < o.workers)
    return absl::InvalidArgumentError("--batch must be >= --workers");
  if (o.steps < 1) return absl::InvalidArgumentError("--steps must be >= 1");
  if (!(o.lr > 0) || !std::isfinite(o.lr))
    return absl::InvalidArgumentError("--lr must be > 0");
  if (o.grad_clip < 0)
    return absl::InvalidArgumentError("--grad_clip must be >= 0");
  if (o.micro_batches < 1)
    return absl::InvalidArgumentError("--micro_batches must be >= 1");
  if (o.tp < 1 || o.tp > 64)
    return absl::InvalidArgumentError("--tp must be in [1, 64]");
  if (o.pp < 1 || o.pp > o.model.layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pp must be in [1, --layers (", o.model.layers, ")]"));
  }
  if ((o.tp > 1 || o.pp > 1) && o.device != Device::kCpu) {
    return absl::UnimplementedError(
        "--tp and --pp run on CPU threads only so far (--device cpu)");
  }
  if (o.ep < 1 || o.ep > 64)
    return absl::InvalidArgumentError("--ep must be in [1, 64]");
  if (o.ep > 1 && o.model.experts == 0) {
    return absl::InvalidArgumentError(
        "--ep splits a mixture of experts: it needs --experts");
  }
  if (o.ep > 1 && o.device != Device::kCpu) {
    return absl::UnimplementedError(
        "--ep runs on CPU threads only so far (--device cpu)");
  }
  if (o.ep > 1 && o.model.experts % o.ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ep ", o.ep, " must divide --experts ", o.model.experts,
                     ": every rank holds as many experts"));
  }
  if (!(o.slowdown >= 1 && o.slowdown <= 100)) {
    return absl::InvalidArgumentError("--slowdown must be in [1, 100]");
  }
  if (!(o.jitter >= 0 && o.jitter < 1)) {
    return absl::InvalidArgumentError("--jitter must be in [0, 1)");
  }
  if (o.slowdown_from < 0 ||
      (o.slowdown_until >= 0 && o.slowdown_until < o.slowdown_from)) {
    return absl::InvalidArgumentError(
        "--slowdown_steps A:B needs 0 <= A and (B = -1 or A <= B)");
  }
  if (o.model.experts > 0 && !o.init_from.empty()) {
    return absl::InvalidArgumentError(
        "--init_from reads GPT-2's layout, which has no mixture-of-experts "
        "layers: it cannot start a model with --experts");
  }
  STRATA_ASSIGN_OR_RETURN(const PushCompression compression,
                          ParseCompression(o.compress));
  if (o.sync == SyncMode::kAllReduce &&
      compression.dtype != v1::DTYPE_UNSPECIFIED) {
    // Whole-step pushes of a group's sum: no one worker's error to carry.
    return absl::InvalidArgumentError(
        "--compress applies to pushes and pulls through the servers "
        "(--sync ps), not to --sync allreduce");
  }
  if (o.compress_freeze_variance &&
      (compression.dtype != v1::DTYPE_ONEBIT ||
       (o.optimizer != "adam" && o.optimizer != "adamw" &&
        o.optimizer != "lamb"))) {
    return absl::InvalidArgumentError(
        "--compress_freeze_variance freezes the second moment of Adam, "
        "AdamW or LAMB under --compress onebit; it needs both");
  }
  return absl::OkStatus();
}

// Whether `o`'s worker pushes gradients (pulls weights) as bf16: the
// option when set, else whether it computes on a GPU.
bool PushesBf16(const TrainerOptions& o) {
  return o.push_bf16.value_or(o.device == Device::kCuda);
}
bool PullsBf16(const TrainerOptions& o) {
  return o.pull_bf16.value_or(o.device == Device::kCuda);
}

// Writes the model's config to o.model_json_path, if set, at the start of
// the run, so `strata generate` and `strata export` read a running job's
// snapshots too. Every worker writes the same text; each through a rename,
// so a reader never sees a torn file.
absl::Status WriteModelJson(const TrainerOptions& o) {
  if (o.model_json_path.empty()) return absl::OkStatus();
  const std::string temp =
      absl::StrCat(o.model_json_path, ".tmp-", static_cast<int>(getpid()));
  std::ofstream f(temp, std::ios::trunc);
  f << GptConfigToJson(o.model) << "\n";
  f.close();
  if (!f || std::rename(temp.c_str(), o.model_json_path.c_str()) != 0) {
    std::remove(temp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot write ", o.model_json_path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SyncMode> ParseSyncMode(absl::string_view name) {
  if (name == "ps") return SyncMode::kPs;
  if (name == "allreduce") return SyncMode::kAllReduce;
  return absl::InvalidArgumentError(
      absl::StrCat("--sync must be ps or allreduce, not '", name, "'"));
}

const char* SyncModeName(SyncMode mode) {
  return mode == SyncMode::kAllReduce ? "allreduce" : "ps";
}

absl::Status CheckTrainerOptions(const TrainerOptions& o) {
  STRATA_RETURN_IF_ERROR(Validate(o));
  if (!o.init_from.empty()) {  // the model's names and shapes
    STRATA_RETURN_IF_ERROR(ServerModel(GptParams(o.model), o).status());
  }
  DatasetOptions dopts;
  dopts.context = o.model.context;
  return TokenDataset::Open(o.data_path, o.model.vocab, dopts).status();
}

namespace {

// The model's host weights and gradients (a CPU model's, or a GPU
// model's, pinned there) move into a shared-memory region that the servers
// on this host map (PsClient::ShareTensors): a pull writes the weights in
// place and a push's gradient is copied out from where backward (or the
// copy from the GPU) left it, with no copy through a slot on the worker's
// side. Under every consistency: an op whose attempt got no answer
// completes only once the server detached the region (client/ps_client.h,
// ShareTensors), so no late write of an abandoned pull lands in the middle
// of a step, unless the client gave up on that server's detach (a server
// without DetachShm, or stalled for shm_detach_timeout): then under
// SSP/ASP one such write may bring newer weights mid-step, as a HOGWILD
// read would, where under BSP it brings the same bytes. (Until the fence,
// SSP/ASP kept the slots for that reason.) Where the region cannot be made, is
// larger than a server maps or (GPU) cannot be pinned, or the model is split
// over ranks, the model stays where it is.
void ShareModelTensors(Model& model, PsClient& ps) {
  const int64_t floats = model.storage_floats();
  if (floats == 0) return;  // a split model
  const uint64_t bytes =
      ShmRegion::kHeaderBytes + static_cast<uint64_t>(floats) * 4;
  if (bytes > ShmRegion::kMaxBytes) return;
  absl::StatusOr<std::unique_ptr<ShmRegion>> region = ShmRegion::Create(bytes);
  absl::Status moved = region.status();
  if (region.ok()) {
    std::shared_ptr<ShmRegion> shared = std::move(*region);
    moved = model.UseStorage(
        reinterpret_cast<float*>(shared->data() + ShmRegion::kHeaderBytes),
        shared);
    if (moved.ok()) {
      ps.ShareTensors(std::move(shared));
      spdlog::info(
          "strata worker: the model's weights and gradients are in shared "
          "memory ({} MiB): servers on this host read and write them there",
          bytes >> 20);
    }
  }
  if (!moved.ok()) {
    spdlog::warn("strata worker: the model stays out of shared memory: {}",
                 moved.ToString());
  }
}

}  // namespace

absl::Status RunTrainer(const TrainerOptions& options) {
  STRATA_RETURN_IF_ERROR(Validate(options));
  TrainerOptions o = options;
  if (o.warmup_steps >= o.steps) {
    // The schedule needs warm-up < total; a short run with the default
    // warm-up is still a sensible request.
    o.warmup_steps = o.steps / 2;
    spdlog::info(
        "strata worker: warm-up shortened to {} steps (half of --steps)",
        o.warmup_steps);
  }
  // With a pipeline, the micro-batches are its own (they keep every stage
  // busy); the trainer hands it the worker's whole share at once.
  const ModelParallelism parallelism{o.tp, o.pp, o.pp > 1 ? o.micro_batches : 1,
                                     o.ep};
  if (o.pp > 1) o.micro_batches = 1;
  if (o.tp > 1 || o.pp > 1) {
    spdlog::info(
        "strata worker: model split over {} tensor-parallel ranks x {} "
        "pipeline stages ({} micro-batches), on CPU threads",
        parallelism.tp, parallelism.pp, parallelism.micro_batches);
  }
  if (o.ep > 1) {
    spdlog::info(
        "strata worker: {} experts of each MoE layer over {} expert-parallel "
        "ranks, on CPU threads",
        o.model.experts, o.ep);
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> gpt,
                          CreateModel(o.model, o.device, parallelism));
  DatasetOptions dopts;
  dopts.context = o.model.context;
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<TokenDataset> data,
      TokenDataset::Open(o.data_path, o.model.vocab, dopts));
  // Before joining: an --init_from file that does not fit is refused here.
  STRATA_ASSIGN_OR_RETURN(ModelSpec spec, ServerModel(gpt->params(), o));

  STRATA_ASSIGN_OR_RETURN(
      WorkerSession session,
      JoinAsWorker(
          SchedulerClientOptions{.scheduler_address = o.scheduler_address,
                                 .address = o.advertise_address,
                                 .metrics_address = o.metrics_address,
                                 .security = o.security},
          o.workers, absl::Seconds(120)));
  if (o.on_joined) o.on_joined();
  PsClientOptions po;
  po.push_dtype = PushesBf16(o) ? v1::DTYPE_BF16 : v1::DTYPE_F32;
  po.pull_dtype = PullsBf16(o) ? v1::DTYPE_BF16 : v1::DTYPE_F32;
  // A GPU worker's default: bf16 where payloads cross a network, fp32
  // through shared memory to servers on its host.
  po.push_fp32_through_shm = !o.push_bf16.has_value();
  po.pull_fp32_through_shm = !o.pull_bf16.has_value();
  // Under all-reduce sync each chunk's pusher changes with the group: no
  // error is carried there.
  po.push_error_feedback = o.error_feedback && o.sync == SyncMode::kPs;
  STRATA_ASSIGN_OR_RETURN(const PushCompression compression,
                          ParseCompression(o.compress));
  if (o.sync == SyncMode::kPs) {
    po.push_compress = compression.dtype;
    if (o.compress_pulls) po.pull_compress = compression.dtype;
    po.topk_ratio = compression.ratio;
    po.compress_from_step = CompressFromStep(o);
    if (MomentumCorrection(o)) po.topk_momentum = kSgdMomentum;
  }
  po.shared_memory = o.shared_memory;
  po.batch_max_bytes = o.batch_bytes;
  po.wire = o.wire;
  po.bulk_insecure = o.bulk_insecure;
  po.security = o.security;
  STRATA_ASSIGN_OR_RETURN(auto ps,
                          PsClient::Create(po, session.scheduler.get()));
  STRATA_RETURN_IF_ERROR(ps->RegisterModel(spec));
  STRATA_RETURN_IF_ERROR(WriteModelJson(o));
  if (o.shared_memory) ShareModelTensors(*gpt, *ps);
  const int workers = session.workers;
  if (o.batch < workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch ", o.batch, " is smaller than the ", workers,
        " live workers: every worker needs at least one sequence per step"));
  }
  return RunTrainerLoop(o, std::move(gpt), std::move(data), std::move(session),
                        std::move(ps));
}

}  // namespace strata
