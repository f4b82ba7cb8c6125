// Helpers shared by the tests of the CUDA kernels (on a GPU, the virtual
// GPU and the emulation): bf16-representable random inputs and closeness
// checks against the CPU kernels. Test-only; needs GoogleTest.
#ifndef STRATA_TESTING_CUDA_TEST_UTIL_H_
#define STRATA_TESTING_CUDA_TEST_UTIL_H_

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"

namespace strata::kernels::cuda::test_util {

// n normal values with standard deviation `scale`, each exactly
// representable in bf16 (so the CPU and the device start from the same).
inline std::vector<float> RandomBf16(size_t n, uint32_t seed,
                                     float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = __bfloat162float(__float2bfloat16(dist(rng)));
  return v;
}

inline std::vector<__nv_bfloat16> ToBf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

template <typename T>
float AsFloat(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return x;
  }
}

// Every got[i] within atol + rtol * |want[i]|; names the first that is not.
template <typename T>
void ExpectClose(const std::vector<T>& got, const std::vector<float>& want,
                 double atol, double rtol, const char* what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(AsFloat(got[i]), want[i], atol + rtol * std::abs(want[i]))
        << what << "[" << i << "]";
  }
}

}  // namespace strata::kernels::cuda::test_util

#endif  // STRATA_TESTING_CUDA_TEST_UTIL_H_
