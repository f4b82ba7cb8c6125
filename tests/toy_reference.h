// The toy problem (examples/toy/toy_problem.h) trained in one process, BSP with
// Adam: what a fault-free cluster of `strata toy` workers computes, up to
// the order of float sums. Shared by the multi-process tests.
#ifndef STRATA_TESTS_TOY_REFERENCE_H_
#define STRATA_TESTS_TOY_REFERENCE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "examples/toy/toy_problem.h"
#include "optim/optimizer.h"

namespace strata::testing {

// An even split of step `step`'s batch (the ledger splits by speed; the
// mean over the whole batch is the same either way, up to rounding).
inline Share EvenShare(int64_t step, int64_t batch, int rank, int workers) {
  const int64_t base = batch / workers, extra = batch % workers;
  Share s;
  s.count = base + (rank < extra ? 1 : 0);
  s.first = step * batch + rank * base + std::min<int64_t>(rank, extra);
  return s;
}

// The weights (w then b) after `steps` steps: per-rank gradients of even
// shares among `workers`, averaged with sample weights in rank order, then
// Adam with learning rate `lr`.
inline std::vector<float> ToyReference(const ToyProblem& p, int64_t steps,
                                       int64_t batch, float lr, int workers) {
  v1::OptimizerConfig config;
  config.set_kind(v1::OptimizerConfig::ADAM);
  config.set_lr(lr);
  OptimizerParams params = *OptimizerParamsFromProto(config);
  std::vector<float> w(p.dim + 1, 0.0f), m(p.dim + 1, 0.0f), v(p.dim + 1, 0.0f);
  std::vector<float> g(p.dim + 1), mean(p.dim + 1);
  for (int64_t step = 0; step < steps; ++step) {
    std::fill(mean.begin(), mean.end(), 0.0f);
    for (int rank = 0; rank < workers; ++rank) {
      const Share share = EvenShare(step, batch, rank, workers);
      ToyGradient(p, w.data(), w[p.dim], share, p.samples, g.data(), &g[p.dim]);
      const float weight =
          static_cast<float>(static_cast<double>(share.count) / batch);
      for (int i = 0; i <= p.dim; ++i) mean[i] += weight * g[i];
    }
    ApplyUpdate(params, ScheduledLr(params, step), step + 1, w.data(), m.data(),
                v.data(), mean.data(), w.size());
  }
  return w;
}

}  // namespace strata::testing

#endif  // STRATA_TESTS_TOY_REFERENCE_H_
