#include "examples/toy/toy_problem.h"

#include <cmath>

#include "common/splitmix.h"

namespace strata {

float ToyProblem::X(int64_t i, int j) const {
  const uint64_t bits = SplitMix(
      seed * 0x100000001b3ull ^ SplitMix(static_cast<uint64_t>(i) * 65537 + j));
  return static_cast<float>(((bits >> 40) * (1.0 / 16777216.0)) * 2.0 - 1.0);
}

float ToyProblem::TrueWeight(int j) const {
  return std::sin(0.37f * j + 0.1f * seed);
}

float ToyProblem::Target(int64_t i) const {
  double y = 0.5;  // b*
  for (int j = 0; j < dim; ++j)
    y += static_cast<double>(X(i, j)) * TrueWeight(j);
  return static_cast<float>(y);
}

double ToyGradient(const ToyProblem& p, const float* w, float b, Share share,
                   int64_t n_total, float* gw, float* gb) {
  std::vector<double> acc(p.dim, 0.0);
  double acc_b = 0.0, loss = 0.0;
  std::vector<float> x(p.dim);
  for (int64_t k = 0; k < share.count; ++k) {
    const int64_t i = (share.first + k) % n_total;
    double pred = b;
    for (int j = 0; j < p.dim; ++j) {
      x[j] = p.X(i, j);
      pred += static_cast<double>(x[j]) * w[j];
    }
    const double err = pred - p.Target(i);
    loss += 0.5 * err * err;
    for (int j = 0; j < p.dim; ++j) acc[j] += err * x[j];
    acc_b += err;
  }
  const double inv = share.count > 0 ? 1.0 / share.count : 0.0;
  for (int j = 0; j < p.dim; ++j) gw[j] = static_cast<float>(acc[j] * inv);
  *gb = static_cast<float>(acc_b * inv);
  return loss * inv;
}

double ToyLoss(const ToyProblem& p, const float* w, float b) {
  std::vector<float> gw(p.dim);
  float gb;
  return ToyGradient(p, w, b, Share{0, p.samples}, p.samples, gw.data(), &gb);
}

}  // namespace strata
