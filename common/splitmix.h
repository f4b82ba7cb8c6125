// SplitMix64: a counter-based generator (one 64-bit draw per key), for
// values that must be a pure function of their index: initial weights, the
// toy dataset.
#ifndef STRATA_COMMON_SPLITMIX_H_
#define STRATA_COMMON_SPLITMIX_H_

#include <cstdint>

namespace strata {

inline uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace strata

#endif  // STRATA_COMMON_SPLITMIX_H_
