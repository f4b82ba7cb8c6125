// A worker's Prometheus series: steps, samples and tokens, loss, throughput,
// and where a step's time goes (pulling the weights, computing, waiting for
// pushes and the commit after backward); with MoE layers, each expert's
// load and the experts' bytes moved (`strata status` shows both).
#ifndef STRATA_TRAINER_WORKER_METRICS_H_
#define STRATA_TRAINER_WORKER_METRICS_H_

#include <vector>

#include "common/metrics.h"

namespace strata {

struct WorkerMetrics {
  // Adds the series to `metrics`, which must outlive this.
  explicit WorkerMetrics(Metrics& metrics);

  Counter& steps;              // steps this worker finished
  Counter& samples;            // samples it computed
  Counter& tokens;             // tokens it computed
  Counter& redone;             // steps it computed again (the workers changed)
  Gauge& step;                 // the last step finished (0-based) + 1
  Gauge& loss;                 // its last training loss
  Gauge& tokens_per_s;         // smoothed, the whole step counted
  Histogram& pull_seconds;     // pulling a step's weights (BSP gate included)
  Histogram& compute_seconds;  // forward and backward
  Histogram& sync_seconds;     // after backward: pushes and commit
};

// The MoE series: per MoE layer and expert, the assignments its last step
// kept (labels layer, expert); the experts' bytes pulled and pushed with a
// payload, and what a dense sync of every expert would have moved each
// way (sparse experts: TrainerOptions::sparse_experts).
struct ExpertMetrics {
  // `moe_layers`: the MoE blocks' indices.
  ExpertMetrics(Metrics& metrics, const std::vector<int>& moe_layers,
                int experts);

  Counter& pulled_bytes;
  Counter& pushed_bytes;
  Counter& dense_bytes;
  std::vector<std::vector<Gauge*>> load;  // [MoE layer][expert]
};

// The names `strata status` reads.
inline constexpr char kExpertLoadSeries[] = "strata_worker_expert_load";
inline constexpr char kExpertPulledSeries[] =
    "strata_worker_expert_pulled_bytes_total";
inline constexpr char kExpertPushedSeries[] =
    "strata_worker_expert_pushed_bytes_total";
inline constexpr char kExpertDenseSeries[] =
    "strata_worker_expert_dense_bytes_total";

}  // namespace strata

#endif  // STRATA_TRAINER_WORKER_METRICS_H_
