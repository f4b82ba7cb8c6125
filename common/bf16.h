// bfloat16 <-> fp32 conversion (round to nearest even), for gradients pushed
// in bf16 and weights pulled in bf16.
#ifndef STRATA_COMMON_BF16_H_
#define STRATA_COMMON_BF16_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace strata {

// The bf16 nearest to the float with bits `u`, ties to even, by the bits
// alone (no branch): right for every value but NaNs, which it may turn into
// infinities or, with every bit set, wrap to zero.
inline uint16_t RoundBf16Bits(uint32_t u) {
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
    return static_cast<uint16_t>((u >> 16) | 0x40);  // keep NaN a NaN
  }
  return RoundBf16Bits(u);
}

inline float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline void Bf16ToFloat(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

// As FloatToBf16(float) on each value. The rounding is RoundBf16Bits, so
// the loop vectorizes; NaNs are noted and redone after.
inline void FloatToBf16(const float* in, uint16_t* out, size_t n) {
  uint32_t nan = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, in + i, 4);
    nan |= static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
    out[i] = RoundBf16Bits(u);
  }
  if (nan == 0) return;
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

}  // namespace strata

#endif  // STRATA_COMMON_BF16_H_
