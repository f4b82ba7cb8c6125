// Gradient accumulation over micro-batches (`--micro_batches`): a worker's
// share of a step computed in pieces that fit its memory, pushed once. The
// step's gradient is the sample-weighted mean of the pieces' mean
// gradients, as one batch's would be (up to float rounding).
#ifndef STRATA_TRAINER_GRAD_ACCUMULATOR_H_
#define STRATA_TRAINER_GRAD_ACCUMULATOR_H_

#include <cstdint>
#include <vector>

#include "common/sum_of_squares.h"  // SumOfSquares, for callers
#include "model/model.h"

namespace strata {

class GradAccumulator {
 public:
  // Sizes of the `pieces` micro-batches (as equal as can be) that `rows`
  // samples split into; fewer when rows < pieces.
  static std::vector<int> Split(int rows, int pieces);

  // After a micro-batch that is not the last: keeps weight * its gradient
  // (grad_data of every parameter), added to what the step kept so far
  // (`first`: nothing yet).
  void Add(Model& model, float weight, bool first);
  // After the last micro-batch, once parameter i's gradient is final:
  // grad_data(i) = kept + weight * grad_data(i), the step's gradient.
  void Finish(Model& model, int i, float weight) const;

 private:
  std::vector<std::vector<float>> kept_;  // per parameter
};

}  // namespace strata

#endif  // STRATA_TRAINER_GRAD_ACCUMULATOR_H_
