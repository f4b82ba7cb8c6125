#include "trainer/worker_metrics.h"

#include <string>

namespace strata {

WorkerMetrics::WorkerMetrics(Metrics& m)
    : steps(m.AddCounter("strata_worker_steps_total", "Steps finished")),
      samples(m.AddCounter("strata_worker_samples_total", "Samples computed")),
      tokens(m.AddCounter("strata_worker_tokens_total", "Tokens computed")),
      redone(m.AddCounter("strata_worker_redone_steps_total",
                          "Steps computed again after the workers changed")),
      step(m.AddGauge("strata_worker_step",
                      "Steps finished so far (the "
                      "last 0-based step + 1)")),
      loss(m.AddGauge("strata_worker_loss", "The last step's training loss")),
      tokens_per_s(m.AddGauge("strata_worker_tokens_per_second",
                              "Tokens per second, whole steps, smoothed")),
      pull_seconds(m.AddHistogram(
          "strata_worker_pull_seconds",
          "Waiting for a step's weights, the consistency gate's wait "
          "included (under BSP with clipping overlapped, also the previous "
          "step's commit, which runs meanwhile); with forward overlapping "
          "the pulls, only the time forward and the step's end waited",
          Histogram::LatencyBounds())),
      compute_seconds(m.AddHistogram("strata_worker_compute_seconds",
                                     "Forward and backward of a step",
                                     Histogram::LatencyBounds())),
      sync_seconds(m.AddHistogram(
          "strata_worker_sync_seconds",
          "After backward: waiting for the pushes (and, under SSP and ASP, "
          "the commit)",
          Histogram::LatencyBounds())) {}

ExpertMetrics::ExpertMetrics(Metrics& m, const std::vector<int>& moe_layers,
                             int experts)
    : pulled_bytes(m.AddCounter(kExpertPulledSeries,
                                "Bytes of MoE experts' weights pulled")),
      pushed_bytes(m.AddCounter(
          kExpertPushedSeries,
          "Bytes of MoE experts' gradients pushed (zero pushes carry none)")),
      dense_bytes(m.AddCounter(
          kExpertDenseSeries,
          "Bytes of every MoE expert's tensors, once per step: what a dense "
          "sync pulls, and pushes")) {
  for (int layer : moe_layers) {
    std::vector<Gauge*>& row = load.emplace_back();
    for (int e = 0; e < experts; ++e) {
      row.push_back(&m.AddGauge(
          kExpertLoadSeries,
          "Tokens an expert of an MoE layer was routed and kept in the last "
          "step",
          {{"layer", std::to_string(layer)}, {"expert", std::to_string(e)}}));
    }
  }
}

}  // namespace strata
