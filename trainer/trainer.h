// The training loop of `strata worker`: a GPT trained data-parallel through
// the parameter servers.
#ifndef STRATA_TRAINER_TRAINER_H_
#define STRATA_TRAINER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "model/model.h"
#include "security/tls.h"
#include "transport/wire_kind.h"

namespace strata {

// How the workers of a job combine their gradients (`--sync`).
enum class SyncMode { kPs, kAllReduce };

// "ps" or "allreduce" as a SyncMode; INVALID_ARGUMENT for any other name.
absl::StatusOr<SyncMode> ParseSyncMode(absl::string_view name);
// The name ParseSyncMode takes.
const char* SyncModeName(SyncMode mode);

struct TrainerOptions {
  std::string scheduler_address;
  GptConfig model;
  // The CPU, or CUDA (bf16 compute on the GPU; fp32 master weights stay on
  // the servers).
  Device device = Device::kCpu;
  // Text file or folder (byte-level tokens) or a token shard.
  std::string data_path = "/usr/share/common-licenses";
  int workers = 1;    // wait until this many workers are live, then start
  int64_t batch = 8;  // global batch in sequences, split over workers
  // Each worker computes its share of a step in this many micro-batches
  // (gradients accumulated, one push per step): less activation memory for
  // the same global batch, one push per micro_batches micro-batches. With
  // pp > 1 they are the pipeline's micro-batches instead.
  int micro_batches = 1;
  // Tensor- and pipeline-parallel ranks inside this worker (CPU threads,
  // model/gpt_parallel.h); the servers see the same model either way.
  int tp = 1;
  int pp = 1;
  // Expert-parallel ranks inside this worker (CPU threads, an MoE model,
  // model/gpt_expert_parallel.h): each runs the dense model on its share
  // of the worker's sequences and experts/ep of the experts.
  int ep = 1;
  int64_t steps = 100;
  uint64_t seed = 1;  // data order and weight init
  // A safetensors file in Hugging Face's GPT-2 layout (model/hf_gpt2.h)
  // the servers start the weights from, instead of drawing them ("": draw).
  // The servers open it at this path themselves; it counts only for chunks
  // a server creates (the first registration of the job, or a server that
  // lost its state without a snapshot).
  std::string init_from;
  // The servers' optimizer (trainer/server_model.cc says each one's
  // settings): adamw, adam, sgd, lamb or adafactor.
  std::string optimizer = "adamw";
  float lr = 1e-3f;           // peak learning rate
  float weight_decay = 0.1f;  // matrices only
  int64_t warmup_steps = 10;
  float min_lr_ratio = 0.1f;  // cosine decay floor, relative to lr
  // SSP/ASP: each push's learning rate times the worker's share of the
  // step's global batch (ps.proto PushRequest.async_lr_scale), else the
  // whole rate, as parameter servers' asynchronous modes apply it.
  bool async_lr_share = false;
  // Clip the worker's gradient to this global L2 norm (0: off). Pushes
  // stream out as backward produces them either way: with clipping, the
  // servers hold them until the worker sends the factor (overlap_clip);
  // with overlap_clip false, the worker scales them and pushes after
  // backward. Both give the same update (with push_bf16, up to rounding:
  // the servers scale after the rounding, the worker before it).
  float grad_clip = 1.0f;
  bool overlap_clip = true;
  // BSP with overlap_clip: pull the next step's weights while the servers
  // apply the commit (the pulls wait at the gate chunk by chunk); false:
  // wait for the commit's answer first.
  bool pull_during_commit = true;
  // Start forward while the step's pulls are in flight, each layer once
  // its weights have landed (ps sync only; false: pull everything first).
  // The same arithmetic either way.
  bool forward_during_pull = true;
  // With MoE layers and ps sync: each step pulls ahead only the experts
  // the worker's previous step routed tokens to (all of them on its first
  // step, and on a step rank 0 evaluates), pulls any other once a router
  // sends tokens to it, and pushes a zero push without payload (ps.proto
  // PushRequest.zero) for each expert none of its tokens reached. An
  // expert no worker's tokens reached keeps its weights and optimizer
  // state (its Adam moments do not decay). false: every expert is pulled
  // and pushed every step, as a dense model's tensors are, so an idle
  // expert takes the update of a zero gradient.
  bool sparse_experts = true;
  // A simulated straggler (benchmarks, tests): each step's forward and
  // backward takes `slowdown` times as long (the worker sleeps the rest
  // before pushing), times a factor drawn uniformly from [1 - jitter,
  // 1 + jitter] each step (at least 1 in all), for steps in [slowdown_from,
  // slowdown_until) (slowdown_until -1: to the end). The sleep counts as
  // computing: the speed the worker reports, which BSP's shares follow,
  // includes it.
  double slowdown = 1;
  double jitter = 0;
  int64_t slowdown_from = 0;
  int64_t slowdown_until = -1;
  // What a CPU worker reports of its processors while it waits for
  // weights (scheduler.proto StepTiming.idle_s, which --consistency auto's
  // rule weighs): false, their idle share over the step (the host's from
  // /proc/stat, where other processes may use the cores a wait frees; or
  // its container's CPU quota's, common/host_cpu.h); true, every wait
  // idle, as for cores of its own that the host's counts do not show (a
  // container pinned to cores without a quota). GPU workers count every
  // wait.
  bool waits_idle = false;
  // Lease steps ahead to train through a scheduler outage this long, in
  // seconds (cluster/lease_ahead.h; 0: lease each step as it comes). BSP
  // splits are made when leased: a worker's speed change moves the shares
  // of the steps leased after it, up to this long later.
  double lease_ahead_s = 30;
  // How workers combine gradients: kPs, each pushes its own and the
  // servers average them; kAllReduce (BSP only), the workers all-reduce
  // them among themselves over Gloo (each gradient as backward finishes
  // it), clip the whole step's gradient, and each pushes its share of the
  // chunks (ps.proto PushRequest.whole_step). The group is formed through
  // the scheduler's KV at each new set of workers.
  SyncMode sync = SyncMode::kPs;
  // allreduce: the address of this host its peers reach its Gloo
  // connections at, and how long a collective may take.
  std::string collective_host = "127.0.0.1";
  // allreduce: gradients are all-reduced in buckets of about this many
  // bytes (collective/grad_buckets.h; 0: one all-reduce per tensor). DDP's
  // default size.
  uint64_t bucket_bytes = uint64_t{25} << 20;
  absl::Duration collective_timeout = absl::Seconds(60);
  // Gradients pushed, weights pulled as bf16 (the servers keep fp32
  // weights and moments and apply fp32 math). Unset: on for a GPU worker,
  // off on the CPU (run_trainer.cc), and then only for payloads in
  // messages (to servers on other hosts): through shared memory the copy
  // of fp32 was cheaper than the conversion, measured on 2 cores
  // (docs/BENCHMARKS.md). A GPU worker computes with
  // bf16 weights, rounded on the device from what it pulls, so a bf16 pull
  // changes nothing it computes and halves the bytes; its gradients come
  // from bf16 activations, and their rounding on the wire is carried by
  // error feedback. A CPU worker that pulls bf16 computes with the rounded
  // weights. The final weights (weights_out) are pulled in fp32 either way.
  std::optional<bool> push_bf16;
  std::optional<bool> pull_bf16;
  // With bf16 pushes (ps sync): each push of a chunk carries the rounding
  // error of its last one (client/error_feedback.h), so what rounding drops
  // is delayed, not lost. Dropped when a step is redone or the job rolls
  // back.
  bool error_feedback = true;
  // Compressed pushes (ps sync; PsClientOptions::push_compress): "none",
  // "onebit" or "topk:R" (R in (0, 1]), from step compress_from on (-1:
  // warmup_steps), always with error feedback.
  std::string compress = "none";
  int64_t compress_from = -1;
  // With "onebit": freeze the servers' Adam/AdamW second moment from that
  // step, as 1-bit Adam does (off by default: docs/ARCHITECTURE.md says
  // what it cost here).
  bool compress_freeze_variance = false;
  // With "topk:R" and the sgd optimizer: DGC's momentum correction, the
  // momentum kept on the worker (PsClientOptions::topk_momentum) and the
  // servers' SGD without one, compressed from step 0.
  bool momentum_correction = true;
  // With compress: pulls come compressed the same way too, as deltas of
  // the weights with the error kept on the servers
  // (PsClientOptions::pull_compress).
  bool compress_pulls = true;
  // Payloads through shared memory to servers on this host.
  bool shared_memory = true;
  // PsClientOptions::batch_max_bytes (`--batch_kib`): pushes and pulls of
  // smaller chunks (and of chunks up to 4 MiB in place in the tensor
  // region) share calls when they queue; 0: a call each.
  uint64_t batch_bytes = 64 << 10;
  // Payloads to the other servers (PsClientOptions::wire, bulk_insecure).
  WireKind wire = WireKind::kGrpc;
  bool bulk_insecure = false;
  int64_t eval_every = 50;  // 0: never
  int eval_batches = 4;
  int64_t log_every = 10;
  std::string metrics_path;  // JSON lines, one per step; "" = none
  // Each worker writes the model config here once it has registered the
  // model (for `strata generate` and `strata export`); "" = none.
  std::string model_json_path;
  // Rank 0 asks every server to snapshot at the end of training.
  bool snapshot_at_end = true;
  // Rank 0 writes the final weights (every tensor, fp32, in params() order).
  std::string weights_out;
  uint64_t chunk_bytes = 4ull << 20;
  // Operations (set by `strata worker`; none by default): the address this
  // worker serves gRPC health on and its Prometheus endpoint, registered
  // with the scheduler for `strata status`; where its series go (not
  // owned; trainer/worker_metrics.h); and a call once it has joined the job.
  std::string advertise_address;
  std::string metrics_address;
  Metrics* metrics = nullptr;
  std::function<void()> on_joined;
  // Set (from another thread) to leave the job after the step under way:
  // RunTrainer then returns OK without the final pull and outputs.
  const std::atomic<bool>* stop = nullptr;
  // TLS for the channels to the scheduler and servers (security/tls.h).
  std::shared_ptr<const Security> security = Security::Plaintext();
};

// Runs one worker to completion: registers, pulls, trains `steps` steps,
// leaves. Errors: INVALID_ARGUMENT for bad options; the first failing
// push/pull/scheduler status otherwise.
absl::Status RunTrainer(const TrainerOptions& options);

// Checks `options` and opens its data as RunTrainer does first, without
// joining anything: a launcher (`strata local`) refuses bad input before it
// starts a process. Errors as RunTrainer's.
absl::Status CheckTrainerOptions(const TrainerOptions& options);

}  // namespace strata

#endif  // STRATA_TRAINER_TRAINER_H_
