// A worker's Prometheus series: steps, samples and tokens, loss, throughput,
// and where a step's time goes (pulling the weights, computing, waiting for
// pushes and the commit after backward).
#ifndef STRATA_TRAINER_WORKER_METRICS_H_
#define STRATA_TRAINER_WORKER_METRICS_H_

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

}  // namespace strata

#endif  // STRATA_TRAINER_WORKER_METRICS_H_
