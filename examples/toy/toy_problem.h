// A least-squares regression problem, generated from a seed, that a toy
// worker trains through the parameter servers. Used by `strata toy`, the
// cluster integration tests (which recompute the same steps in one process
// as a reference) and the push/pull demo.
#ifndef STRATA_EXAMPLES_TOY_TOY_PROBLEM_H_
#define STRATA_EXAMPLES_TOY_TOY_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "common/work_share.h"

namespace strata {

// y_i = x_i . w* + b*, with x_i uniform in [-1, 1]^dim, all from `seed`.
struct ToyProblem {
  int dim = 256;
  int64_t samples = 4096;
  uint64_t seed = 1;

  // Feature j of sample i.
  float X(int64_t i, int j) const;
  float Target(int64_t i) const;
  float TrueWeight(int j) const;
};

// Mean gradient of 0.5*(x.w + b - y)^2 over `share`: writes dim values to
// gw and one to gb; returns the mean loss. Sums in double for accuracy.
double ToyGradient(const ToyProblem& p, const float* w, float b, Share share,
                   int64_t n_total, float* gw, float* gb);

// Mean loss over every sample.
double ToyLoss(const ToyProblem& p, const float* w, float b);

}  // namespace strata

#endif  // STRATA_EXAMPLES_TOY_TOY_PROBLEM_H_
