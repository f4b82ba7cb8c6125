#include "kernels/crossentropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/parallel.h"
#include "kernels/vec_math.h"

namespace strata::kernels {
namespace {

// The max of a row of length V.
float RowMax(const float* x, int V) {
  float m = x[0];
#pragma omp simd reduction(max : m)
  for (int v = 1; v < V; ++v) m = std::max(m, x[v]);
  return m;
}

// sum(exp(x - m)) over a row.
float RowSumExp(const float* x, float m, int V) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; ++v) sum += VecExp(x[v] - m);
  return sum;
}

// x = exp(x - m) over a row; returns the sum.
float ExpInPlace(float* x, float m, int V) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; ++v) {
    x[v] = VecExp(x[v] - m);
    sum += x[v];
  }
  return sum;
}

void Scale(float* x, float scale, int V) {
#pragma omp simd
  for (int v = 0; v < V; ++v) x[v] *= scale;
}

}  // namespace

void CrossEntropyForward(float* losses, const float* logits,
                         const int32_t* targets, int N, int V) {
  ParallelFor(N, 1, [&](int, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = logits + n * V;
      const float m = RowMax(x, V);
      losses[n] = m + std::log(RowSumExp(x, m, V)) - x[targets[n]];
    }
  });
}

float SoftmaxCrossEntropyFused(float* logits, const int32_t* targets,
                               float dloss, float* losses, int N, int V) {
  std::vector<double> sums(NumChunks(N, 1), 0.0);
  ParallelFor(N, 1, [&](int chunk, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      float* x = logits + n * V;
      const float m = RowMax(x, V);
      const float target_logit = x[targets[n]];
      // x becomes exp(x - m), then the scaled softmax.
      const float sum = ExpInPlace(x, m, V);
      const float loss = m + std::log(sum) - target_logit;
      if (losses != nullptr) losses[n] = loss;
      sums[chunk] += loss;
      const float scale = dloss / sum;
      Scale(x, scale, V);
      x[targets[n]] -= dloss;
    }
  });
  double total = 0;
  for (double s : sums) total += s;
  return static_cast<float>(total);
}

}  // namespace strata::kernels
