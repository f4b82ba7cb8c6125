// The fp32 -> bf16 conversion kernel of gpt_cuda_convert_kernels.cuh, run
// on the CPU emulation of testing/cuda/emulation.h with its launcher's grid
// and checked bit for bit against round to nearest even (common/bf16.h).
#include "testing/cuda/emulation.h"  // first: it configures the kernels
// (blank line keeps the include order)
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/bf16.h"
#include "gtest/gtest.h"
#include "model/gpt_cuda_convert_kernels.cuh"

namespace strata::gpt_cuda {
namespace {

using kernels::cuda::bf16;
using namespace convert;  // NOLINT

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t Bits(bf16 b) {
  uint16_t u;
  std::memcpy(&u, &b, 2);
  return u;
}

TEST(GptCudaConvertEmulated, FloatToBf16RoundsToNearestEven) {
  std::vector<float> in = {
      0.0f,
      -0.0f,
      1.0f,
      -2.5f,
      FromBits(0x3f808000u),  // halfway, even below: rounds down
      FromBits(0x3f818000u),  // halfway, odd below: rounds up
      FromBits(0x3f808001u),  // just above halfway: rounds up
      FromBits(0x3f807fffu),  // just below halfway: rounds down
      FromBits(0x7f7f8000u),  // halfway to infinity: rounds to it
      std::numeric_limits<float>::max(),
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::denorm_min(),
      -1e-40f};
  // Random bit patterns: every exponent, subnormals and NaNs included.
  std::mt19937 rng(1);
  while (in.size() < 1000) in.push_back(FromBits(rng()));  // a partial block
  const int64_t n = static_cast<int64_t>(in.size());
  // The launcher's grid, and a 2-block grid that makes the loop stride.
  for (const int blocks : {FloatToBf16Blocks(n), 2}) {
    SCOPED_TRACE(blocks);
    std::vector<bf16> out(n, __float2bfloat16(1e30f));
    emu::RunGrid(dim3(blocks), kThreads, 0,
                 [&] { FloatToBf16Kernel(out.data(), in.data(), n); });
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = ::strata::FloatToBf16(in[i]);
      if (std::isnan(in[i])) {  // any NaN will do
        ASSERT_TRUE(std::isnan(::strata::Bf16ToFloat(Bits(out[i])))) << i;
      } else {
        ASSERT_EQ(Bits(out[i]), want) << i << ": " << in[i];
      }
    }
  }
}

}  // namespace
}  // namespace strata::gpt_cuda
