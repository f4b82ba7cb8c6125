// Compressed gradients on the wire (ps.proto DType ONEBIT and TOPK): the
// encodings and their decoders, which check the layout of what they read
// (a server decodes what any client sent) and leave the values' check to
// the server's, as for fp32: a non-finite gradient decodes to non-finite
// values and is refused there. The error a sender carries to its next
// push is client/error_feedback.h's.
//
// ONEBIT: the sign of each element and one scale per block of
// kOneBitBlock elements, the mean |x| of the block (the scale that makes
// sign * scale closest to x in L2) rounded to bf16. Layout: bf16
// scales[ceil(n / 64)], then u8 bits[ceil(n / 8)], bit i % 8 of byte i / 8
// set for a negative element. 1.25 bits an element, 1/25.6 of fp32.
//
// Why blocks of 64: an element that moves more than its block's mean moves
// only by the mean per step, its error feedback catching up later; with
// 256-element blocks of weight deltas (compressed pulls) that lag cost a
// 2-layer GPT 40% of its held-out loss at 1000 steps, with 64 it cost 5%
// (docs/BENCHMARKS.md), for 0.125 bits an element more.
//
// TOPK: the k elements of largest magnitude as (u32 index, f32 value)
// pairs with strictly increasing indices; the rest are 0. k is the
// payload's size / 8.
#ifndef STRATA_COMMON_COMPRESS_H_
#define STRATA_COMMON_COMPRESS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace strata {

inline constexpr size_t kOneBitBlock = 64;

// Bytes of the ONEBIT encoding of n elements.
size_t OneBitBytes(size_t n);
// Encodes x[0, n) into out[0, OneBitBytes(n)); writes what the receiver
// decodes into decoded[0, n) (for the sender's error). A block with a
// value that is not finite gets a NaN scale (so it decodes to NaN).
void EncodeOneBit(const float* x, size_t n, char* out, float* decoded);
// Decodes `in` into out[0, n). INVALID_ARGUMENT for a size other than
// OneBitBytes(n), a negative scale, or bits set past n.
absl::Status DecodeOneBit(absl::string_view in, size_t n, float* out);

// The number of elements TOPK keeps of n at `ratio` (in (0, 1]): at least
// one, at most n.
size_t TopKCount(size_t n, double ratio);
// Encodes the k largest |x[i]| (ties: the lower index; a value that is not
// finite counts as largest) as 8 * k bytes into *out; writes what the
// receiver decodes into decoded[0, n).
void EncodeTopK(const float* x, size_t n, size_t k, std::string* out,
                float* decoded);
// Decodes `in` into out[0, n). INVALID_ARGUMENT for a size that is not a
// multiple of 8 or holds more than n pairs, or indices not strictly
// increasing or past n.
absl::Status DecodeTopK(absl::string_view in, size_t n, float* out);

}  // namespace strata

#endif  // STRATA_COMMON_COMPRESS_H_
