#include "bench/read_pass.h"

#include "common/target_clones.h"

namespace strata::bench {

STRATA_CLONES uint64_t XorWords(const uint64_t* w, int64_t n) {
  uint64_t lane[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) lane[j] ^= w[k + j];
  }
  for (; k < n; ++k) lane[0] ^= w[k];
  uint64_t x = 0;
  for (uint64_t l : lane) x ^= l;
  return x;
}

}  // namespace strata::bench
