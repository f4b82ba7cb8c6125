#include "trainer/grad_accumulator.h"

#include <algorithm>

#include "common/parallel.h"

namespace strata {

std::vector<int> GradAccumulator::Split(int rows, int pieces) {
  pieces = std::max(1, std::min(pieces, rows));
  std::vector<int> sizes(pieces, rows / pieces);
  for (int k = 0; k < rows % pieces; ++k) sizes[k]++;
  return sizes;
}

void GradAccumulator::Add(Model& model, float weight, bool first) {
  const int n = static_cast<int>(model.params().size());
  kept_.resize(n);
  for (int i = 0; i < n; ++i) {
    const float* g = model.grad_data(i);
    const size_t numel = model.params()[i].spec.numel();
    std::vector<float>& k = kept_[i];
    if (first) {
      k.resize(numel);
      for (size_t j = 0; j < numel; ++j) k[j] = weight * g[j];
    } else {
      for (size_t j = 0; j < numel; ++j) k[j] += weight * g[j];
    }
  }
}

void GradAccumulator::Finish(Model& model, int i, float weight) const {
  float* g = model.grad_data(i);
  const std::vector<float>& k = kept_[i];
  for (size_t j = 0; j < k.size(); ++j) g[j] = k[j] + weight * g[j];
}

}  // namespace strata
