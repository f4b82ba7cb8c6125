#include "server/server_metrics.h"

#include <string>

namespace strata {
namespace {

constexpr const char* kMethodNames[] = {"push", "pull", "commit"};

}  // namespace

ServerMetrics::ServerMetrics(Metrics* metrics, const Shard* shard,
                             std::function<uint64_t()> shm_payloads,
                             std::function<uint64_t()> shm_tensor_payloads)
    : metrics_(metrics) {
  for (int m = 0; m < kMethods; ++m) {
    seconds_[m] = &metrics->AddHistogram(
        "strata_server_request_seconds",
        "Time from a request's arrival to its answer",
        Histogram::LatencyBounds(), {{"method", kMethodNames[m]}});
  }
  const ShardCounters* c = &shard->counters();
  auto read = [](const std::atomic<uint64_t>& v) {
    return [&v] { return static_cast<double>(v.load()); };
  };
  metrics->AddCounterFn("strata_server_pushes_applied_total",
                        "Pushes applied to a chunk", read(c->pushes_applied));
  metrics->AddCounterFn("strata_server_pulls_total", "Pulls asked for",
                        read(c->pulls));
  metrics->AddCounterFn("strata_server_bytes_total",
                        "Payload bytes received (in) and sent (out)",
                        read(c->bytes_in), {{"direction", "in"}});
  metrics->AddCounterFn("strata_server_bytes_total",
                        "Payload bytes received (in) and sent (out)",
                        read(c->bytes_out), {{"direction", "out"}});
  const char* kRejected = "Pushes and pulls refused, by reason";
  metrics->AddCounterFn("strata_server_rejected_total", kRejected,
                        read(c->rejected_nonfinite), {{"reason", "nonfinite"}});
  metrics->AddCounterFn("strata_server_rejected_total", kRejected,
                        read(c->rejected_other), {{"reason", "invalid"}});
  metrics->AddCounterFn("strata_server_rejected_total", kRejected,
                        read(c->rejected_busy), {{"reason", "busy"}});
  metrics->AddCounterFn("strata_server_rejected_total", kRejected,
                        read(c->aborted_stale_epoch),
                        {{"reason", "stale_epoch"}});
  metrics->AddCounterFn("strata_server_rejected_total", kRejected,
                        read(c->aborted_rolled_back),
                        {{"reason", "rolled_back"}});
  metrics->AddCounterFn("strata_server_gate_waits_total",
                        "Pulls that waited at the consistency gate",
                        read(c->gate_waits));
  metrics->AddCounterFn(
      "strata_server_gate_wait_seconds_total",
      "Time pulls spent waiting at the consistency gate (BSP: for the "
      "slowest worker's push)",
      [c] { return static_cast<double>(c->gate_wait_ns.load()) * 1e-9; });
  metrics->AddCounterFn("strata_server_bsp_samples_applied_total",
                        "Samples behind every closed BSP step",
                        read(c->bsp_samples_applied));
  metrics->AddCounterFn(
      "strata_server_bsp_tiling_errors_total",
      "Closed BSP steps whose pushes did not tile one run of samples",
      read(c->bsp_tiling_errors));
  metrics->AddCounterFn(
      "strata_server_shm_payloads_total",
      "Pushes and pulls whose payload went through shared memory",
      [shm_payloads] { return static_cast<double>(shm_payloads()); });
  metrics->AddCounterFn(
      "strata_server_shm_tensor_payloads_total",
      "Pushes and pulls in place in a caller's tensor region (of the above)",
      [shm_tensor_payloads] {
        return static_cast<double>(shm_tensor_payloads());
      });
  metrics->AddGaugeFn(
      "strata_server_chunks", "Chunks this server holds",
      [shard] { return static_cast<double>(shard->num_chunks()); });
  metrics->AddGaugeFn(
      "strata_server_generation", "The shard's rollback generation",
      [shard] { return static_cast<double>(shard->generation()); });
  metrics->AddGaugeFn(
      "strata_server_pulls_waiting", "Pulls waiting at the consistency gate",
      [c] { return static_cast<double>(c->pulls_waiting.load()); });
  if (const SpillStore* spill = shard->spill(); spill != nullptr) {
    const SpillCounters* t = &spill->counters();
    metrics->AddGaugeFn(
        "strata_server_tier_ram_budget_bytes",
        "RAM budget for parameter tiles (--ram_budget)",
        [spill] { return static_cast<double>(spill->budget()); });
    const char* kTierBytes = "Parameter tile bytes in RAM and spilled to disk";
    metrics->AddGaugeFn("strata_server_tier_bytes", kTierBytes,
                        read(t->resident_bytes), {{"tier", "ram"}});
    metrics->AddGaugeFn("strata_server_tier_bytes", kTierBytes,
                        read(t->spilled_bytes), {{"tier", "disk"}});
    const char* kUses = "Tile uses that found it in RAM (hit) or read it";
    metrics->AddCounterFn("strata_server_tier_uses_total", kUses, read(t->hits),
                          {{"result", "hit"}});
    metrics->AddCounterFn("strata_server_tier_uses_total", kUses,
                          read(t->misses), {{"result", "miss"}});
    metrics->AddCounterFn("strata_server_tier_prefetched_total",
                          "Tiles read from disk ahead of use",
                          read(t->prefetched));
    metrics->AddCounterFn(
        "strata_server_tier_written_behind_total",
        "Changed tiles written to disk ahead of their spill, off the requests",
        read(t->written_behind));
    metrics->AddCounterFn(
        "strata_server_tier_spills_written_total",
        "Spills that had to write their tile first (a request or read-ahead "
        "waited on the write)",
        read(t->spills_written));
    metrics->AddCounterFn(
        "strata_server_tier_weight_reads_total",
        "Pulls of a spilled tile, served by reading its weights alone (they "
        "count as misses too)",
        read(t->weight_reads));
    const char* kAhead =
        "Read-aheads spilled before their use, or not made "
        "because the budget held only other read-aheads";
    metrics->AddCounterFn("strata_server_tier_read_aheads_wasted_total", kAhead,
                          read(t->read_ahead_unused), {{"why", "unused"}});
    metrics->AddCounterFn("strata_server_tier_read_aheads_wasted_total", kAhead,
                          read(t->read_aheads_skipped), {{"why", "no_room"}});
    const char* kIo = "Bytes of tiles read from and written to the spill disk";
    metrics->AddCounterFn("strata_server_tier_io_bytes_total", kIo,
                          read(t->read_bytes), {{"direction", "read"}});
    metrics->AddCounterFn("strata_server_tier_io_bytes_total", kIo,
                          read(t->write_bytes), {{"direction", "write"}});
    metrics->AddCounterFn("strata_server_tier_write_errors_total",
                          "Tiles the spill disk refused (they stay in RAM)",
                          read(t->write_errors));
  }
}

void ServerMetrics::Answered(Method method, const absl::Status& status,
                             absl::Duration took) {
  seconds_[method]->Observe(absl::ToDoubleSeconds(took));
  const int code = static_cast<int>(status.code());
  if (code < 0 || code >= kCodes) return;
  std::atomic<Counter*>& slot = requests_[method][code];
  Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Two first answers may race here; CounterFor gives both the same one.
    counter = &metrics_->CounterFor(
        "strata_server_requests_total", "Requests answered, by answer code",
        {{"method", kMethodNames[method]},
         {"code", absl::StatusCodeToString(status.code())}});
    slot.store(counter, std::memory_order_release);
  }
  counter->Add();
}

}  // namespace strata
