// Helpers for the tests of a GPU model against the CPU Gpt (GptCuda's):
// the same bf16-rounded weights in both, and the tolerances of the
// comparison. Header-only, for tests.
//
// Both models get the same weights, already rounded to bf16, so the
// difference is the GPU's bf16 activations (8 significant bits, relative
// 2^-8 = 0.4% per rounding, compounded through ~10 ops per block and the
// bf16 residual-stream gradient). Tolerances:
//  - loss: |gpu - cpu| <= 2e-2 + 1e-2 * |cpu| (the loss is ~ln(vocab) = 4);
//  - each gradient tensor: relative L2 error ||gpu - cpu|| / ||cpu|| <= 3e-2,
//    and each element within atol + rtol * |cpu| with rtol = 5e-2 and atol
//    = 5e-2 * max|cpu| over the tensor (bf16 noise scales with the tensor's
//    magnitude, not the element's: many gradients are near zero).
#ifndef STRATA_TESTING_GPU_MODEL_TEST_UTIL_H_
#define STRATA_TESTING_GPU_MODEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "common/bf16.h"
#include "gtest/gtest.h"
#include "model/gpt.h"
#include "model/model.h"

namespace strata::testing {

inline constexpr double kLossAtol = 2e-2, kLossRtol = 1e-2;
inline constexpr double kGradRelL2 = 3e-2, kGradRtol = 5e-2,
                        kGradAtolOfMax = 5e-2;

// Initializes `cpu`, rounds its weights to bf16 and copies them to `gpu`.
// GPT-2's init makes biases 0 and LayerNorm scales 1, which would hide a
// kernel that drops a bias or a scale: those are perturbed here.
inline void ShareBf16Weights(Gpt& cpu, Model& gpu, uint64_t seed) {
  cpu.InitParams(seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> jitter(0.0f, 0.1f);
  for (size_t i = 0; i < cpu.params().size(); ++i) {
    const int p = static_cast<int>(i);
    const int64_t n = static_cast<int64_t>(cpu.params()[i].spec.numel());
    float* w = cpu.param_data(p);
    if (cpu.params()[i].init != ParamInfo::kNormal) {
      for (int64_t j = 0; j < n; ++j) w[j] += jitter(rng);
    }
    for (int64_t j = 0; j < n; ++j) w[j] = Bf16ToFloat(FloatToBf16(w[j]));
    std::copy(w, w + n, gpu.param_data(p));
  }
}

// Checks `got` against `want` (n values) with the tolerances above.
inline void ExpectGradClose(const float* got, const float* want, int64_t n,
                            const std::string& name) {
  double max_ref = 0, err2 = 0, ref2 = 0;
  for (int64_t j = 0; j < n; ++j) {
    max_ref = std::max(max_ref, std::abs(double{want[j]}));
    err2 += (double{got[j]} - want[j]) * (double{got[j]} - want[j]);
    ref2 += double{want[j]} * want[j];
  }
  EXPECT_LE(std::sqrt(err2), kGradRelL2 * std::sqrt(ref2) + 1e-12) << name;
  const double atol = kGradAtolOfMax * max_ref;
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_NEAR(got[j], want[j], atol + kGradRtol * std::abs(want[j]))
        << name << "[" << j << "]";
  }
}

}  // namespace strata::testing

#endif  // STRATA_TESTING_GPU_MODEL_TEST_UTIL_H_
