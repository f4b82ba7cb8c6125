#include "storage/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace strata::crc32c {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // reflected Castagnoli

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? kPolynomial : 0);
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

#if defined(__x86_64__)
// The CRC instruction takes 3 cycles and can start one every cycle, so
// three independent streams over thirds of a block go three times as fast
// as one; the three registers are then joined by shifting one past the
// bytes of the next (feeding zeros is linear in the register, so a shift
// is four table lookups).
constexpr size_t kStreamBytes = 4096;  // per stream of a 3-way block

// Each byte of a register, moved past kStreamBytes zero bytes.
struct ShiftTable {
  uint32_t byte[4][256];
};

__attribute__((target("sse4.2"))) uint32_t PastZeros(uint32_t reg) {
  uint64_t c = reg;
  for (size_t i = 0; i < kStreamBytes / 8; ++i) c = _mm_crc32_u64(c, 0);
  return static_cast<uint32_t>(c);
}

ShiftTable MakeShiftTable() {
  uint32_t bit[32];
  for (int i = 0; i < 32; ++i) bit[i] = PastZeros(uint32_t{1} << i);
  ShiftTable t{};
  for (int k = 0; k < 4; ++k) {
    for (int b = 0; b < 256; ++b) {
      for (int i = 0; i < 8; ++i) {
        if ((b >> i) & 1) t.byte[k][b] ^= bit[8 * k + i];
      }
    }
  }
  return t;
}

uint32_t Shift(const ShiftTable& t, uint32_t reg) {
  return t.byte[0][reg & 0xff] ^ t.byte[1][(reg >> 8) & 0xff] ^
         t.byte[2][(reg >> 16) & 0xff] ^ t.byte[3][reg >> 24];
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc,
                                                       absl::string_view s) {
  static const ShiftTable kShift = MakeShiftTable();
  const char* p = s.data();
  size_t n = s.size();
  uint64_t c = ~crc;
  for (; n >= 3 * kStreamBytes; n -= 3 * kStreamBytes, p += 3 * kStreamBytes) {
    uint64_t b = 0, d = 0;
    for (size_t i = 0; i < kStreamBytes; i += 8) {
      uint64_t w0, w1, w2;
      std::memcpy(&w0, p + i, 8);
      std::memcpy(&w1, p + kStreamBytes + i, 8);
      std::memcpy(&w2, p + 2 * kStreamBytes + i, 8);
      c = _mm_crc32_u64(c, w0);
      b = _mm_crc32_u64(b, w1);
      d = _mm_crc32_u64(d, w2);
    }
    // Feeding the second third from c is feeding it from 0, xor c moved
    // past it; likewise the third.
    c = Shift(kShift, Shift(kShift, static_cast<uint32_t>(c)) ^
                          static_cast<uint32_t>(b)) ^
        static_cast<uint32_t>(d);
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, static_cast<uint8_t>(*p));
  return ~c32;
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, absl::string_view data) {
  uint32_t c = ~crc;
  for (char ch : data) {
    c = kTable[(c ^ static_cast<uint8_t>(ch)) & 0xff] ^ (c >> 8);
  }
  return ~c;
}

uint32_t Extend(uint32_t crc, absl::string_view data) {
#if defined(__x86_64__)
  static const bool kHasSse42 = __builtin_cpu_supports("sse4.2");
  if (kHasSse42) return ExtendSse42(crc, data);
#endif
  return ExtendPortable(crc, data);
}

}  // namespace strata::crc32c
