// `strata toy`: a least-squares worker through the parameter servers.
#include <memory>

#include "cli/commands.h"
#include "cli/ops.h"
#include "examples/toy/toy_worker.h"

namespace strata {

CommandFn AddToyCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "toy",
      "Train a least-squares toy model through the servers (one worker)");
  auto o = std::make_shared<ToyWorkerOptions>();
  cmd->add_option("--scheduler", o->scheduler_address, "scheduler host:port")
      ->required()
      ->check(DialAddress());
  cmd->add_option("--workers", o->workers,
                  "start once this many workers are live")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "training steps")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "global batch (split over workers)")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--dim", o->problem.dim, "features")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--samples", o->problem.samples, "dataset size")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--seed", o->problem.seed, "dataset seed")
      ->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer, "sgd | adam | adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "learning rate")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--chunk_bytes", o->chunk_bytes,
                  "chunk size in bytes (multiple of 4)")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_flag("--probe", o->probe,
                "check the SSP staleness bound on every read");
  cmd->add_option("--delay_ms", o->delay_ms,
                  "sleep rank*delay_ms per step (simulates slow workers)")
      ->check(NonNegativeNumber());
  cmd->add_option("--sample_cost_us", o->sample_cost_us,
                  "emulated compute: sleep this long per sample")
      ->check(NonNegativeNumber());
  cmd->add_option("--throttle", o->throttle,
                  "multiply the emulated compute time (a slow worker)")
      ->check(CLI::Range(1.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--lease_ahead_s", o->lease_ahead_s,
                  "lease steps ahead to train through a scheduler outage "
                  "this long (0: lease each step as it comes)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--out", o->out, "rank 0 writes the final weights here");
  cmd->add_option("--log_every", o->log_every,
                  "print a progress line every N steps (0: never)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--shm", o->shared_memory,
                  "carry payloads through shared memory to servers on this "
                  "host")
      ->capture_default_str();
  AddWireFlags(cmd, &o->wire, &o->bulk_insecure,
               "grpc | ucx | auto, as the worker's");
  cmd->add_option("--bulk_min_bytes", o->bulk_min_bytes,
                  "payloads under this many bytes stay in messages")
      ->capture_default_str();
  auto tls = std::make_shared<TlsFlags>();
  AddTlsFlags(cmd, tls.get(), /*listens=*/false);
  return [o, tls] {
    auto security = LoadSecurity(*tls, Role::kWorker);
    if (!security.ok()) return ReportStatus("toy", security.status());
    o->security = *security;
    return ReportStatus("toy", RunToyWorker(*o));
  };
}

}  // namespace strata
