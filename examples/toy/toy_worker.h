// `strata toy`: a worker that trains ToyProblem (least squares) through the
// parameter servers, one process per worker. It is the push/pull demo and
// the subject of the cluster integration tests.
#ifndef STRATA_EXAMPLES_TOY_TOY_WORKER_H_
#define STRATA_EXAMPLES_TOY_TOY_WORKER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "examples/toy/toy_problem.h"
#include "security/tls.h"
#include "transport/wire_kind.h"

namespace strata {

struct ToyWorkerOptions {
  std::string scheduler_address;
  int workers = 1;  // wait until this many workers are live, then start
  int64_t steps = 200;
  int64_t batch = 64;  // global batch, split over workers by the ledger
  ToyProblem problem;
  std::string optimizer = "adam";  // sgd | adam | adamw
  float lr = 0.02f;
  uint64_t chunk_bytes = 1024;  // small, so a small model spans many chunks
  // SSP instrumentation: a counter tensor each worker bumps at its rank;
  // every read checks it saw all pushes older than the staleness bound.
  bool probe = false;
  std::string out;  // rank 0 writes final weights here (raw fp32: w then b)
  int log_every = 50;
  // Sleep rank * delay_ms per step: workers of different speeds, so that
  // SSP and ASP runs really see stale reads.
  int delay_ms = 0;
  // Emulated compute: sleep sample_cost_us * throttle per sample of a step.
  // The worker reports its speed from this, so a throttled worker gets a
  // smaller share of each BSP step (scheduler/ledger.h).
  double sample_cost_us = 0;
  double throttle = 1.0;
  // Lease steps ahead to train through a scheduler outage this long, in
  // seconds (cluster/lease_ahead.h; 0: each step as it comes).
  double lease_ahead_s = 30;
  // TLS for the channels to the scheduler and servers (security/tls.h).
  std::shared_ptr<const Security> security = Security::Plaintext();
  // Payload paths (PsClientOptions::shared_memory, wire, bulk_min_bytes).
  bool shared_memory = true;
  WireKind wire = WireKind::kGrpc;
  bool bulk_insecure = false;
  uint64_t bulk_min_bytes = 64 << 10;
};

// Runs the worker to completion. Prints progress lines and, at the end,
// `final_loss <x>` (rank 0) and, with probe, `ssp_reads <n> ssp_violations
// <v> ssp_stale_reads <s>`.
absl::Status RunToyWorker(const ToyWorkerOptions& options);

}  // namespace strata

#endif  // STRATA_EXAMPLES_TOY_TOY_WORKER_H_
