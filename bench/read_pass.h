// A plain read of an array: the limit of a pass that reads every byte once
// (a norm, a checksum) from wherever the array is (a cache, or memory for
// arrays larger than the caches), measured in the same run.
#ifndef STRATA_BENCH_READ_PASS_H_
#define STRATA_BENCH_READ_PASS_H_

#include <cstdint>

namespace strata::bench {

// Reads every word: an XOR over 64-bit words in independent lanes, which
// vectorizes and leaves the memory as the only limit.
uint64_t XorWords(const uint64_t* w, int64_t n);

}  // namespace strata::bench

#endif  // STRATA_BENCH_READ_PASS_H_
