// The sum of squares of a float array in double: a gradient's norm for
// clipping (the trainer's, and StepSession's for Python and the toy).
#ifndef STRATA_COMMON_SUM_OF_SQUARES_H_
#define STRATA_COMMON_SUM_OF_SQUARES_H_

#include <cstdint>

namespace strata {

// The sum of squares of g[0..n), in double, split over the process's
// parallel loop (common/parallel.h) the same way every time, so the result
// is reproducible.
double SumOfSquares(const float* g, int64_t n);

}  // namespace strata

#endif  // STRATA_COMMON_SUM_OF_SQUARES_H_
