#include "common/compress.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bf16.h"

namespace strata {
namespace {

size_t Blocks(size_t n) { return (n + kOneBitBlock - 1) / kOneBitBlock; }

// |v|, with a value that is not finite counted as infinite.
float Magnitude(float v) {
  const float a = std::fabs(v);
  return std::isfinite(a) ? a : std::numeric_limits<float>::infinity();
}

// The k-th largest Magnitude of x[0, n) (1 <= k <= n). From a sample
// first: every element at or above the sample's estimate of the 2k-th
// largest is a candidate, and when there are k candidates or more the k-th
// largest is among them, exactly; else (or for a small or dense selection)
// it is found among all n. The sample saves a selection over all n, which
// costs several times the passes around it.
float KthMagnitude(const float* x, size_t n, size_t k) {
  constexpr size_t kSample = 4096;
  thread_local std::vector<float> pool;
  if (n >= 16 * kSample && k <= n / 16) {
    const size_t stride = n / kSample;
    pool.resize(kSample);
    for (size_t i = 0; i < kSample; ++i) pool[i] = Magnitude(x[i * stride]);
    const size_t at = std::min(kSample - 1, 2 * k * kSample / n);
    std::nth_element(pool.begin(), pool.begin() + at, pool.end(),
                     std::greater<float>());
    const float estimate = pool[at];
    pool.clear();
    for (size_t i = 0; i < n; ++i) {
      const float a = Magnitude(x[i]);
      if (a >= estimate) pool.push_back(a);
    }
    if (pool.size() >= k) {
      std::nth_element(pool.begin(), pool.begin() + (k - 1), pool.end(),
                       std::greater<float>());
      return pool[k - 1];
    }
  }
  pool.resize(n);
  for (size_t i = 0; i < n; ++i) pool[i] = Magnitude(x[i]);
  std::nth_element(pool.begin(), pool.begin() + (k - 1), pool.end(),
                   std::greater<float>());
  return pool[k - 1];
}

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("compressed gradient: ", what));
}

}  // namespace

size_t OneBitBytes(size_t n) { return Blocks(n) * 2 + (n + 7) / 8; }

void EncodeOneBit(const float* x, size_t n, char* out, float* decoded) {
  const size_t blocks = Blocks(n);
  uint8_t* bits = reinterpret_cast<uint8_t*>(out + blocks * 2);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * kOneBitBlock;
    const size_t end = std::min(n, begin + kOneBitBlock);
    // Eight float lanes, so the sum vectorizes (and rounds alike
    // everywhere); 64 values in float are within 2^-18 of their sum, far
    // inside the bf16 the mean is rounded to.
    float lane[8] = {};
    size_t i = begin;
    for (; i + 8 <= end; i += 8) {
      for (int l = 0; l < 8; ++l) lane[l] += std::fabs(x[i + l]);
    }
    for (int l = 0; i < end; ++i, ++l) lane[l] += std::fabs(x[i]);
    float sum = 0;
    for (float v : lane) sum += v;
    float mean = sum / static_cast<float>(end - begin);
    if (!std::isfinite(sum)) mean = std::numeric_limits<float>::quiet_NaN();
    const uint16_t half = FloatToBf16(mean);  // keeps a NaN a NaN
    std::memcpy(out + b * 2, &half, 2);
    const float scale = Bf16ToFloat(half);
    for (size_t k = begin; k < end; ++k) {
      decoded[k] = std::copysign(scale, x[k]);
    }
    // A byte of signs at a time (blocks start at multiples of 8).
    for (size_t byte = begin; byte < end; byte += 8) {
      const size_t stop = std::min(end, byte + 8);
      uint32_t packed = 0;
      for (size_t k = byte; k < stop; ++k) {
        uint32_t u;
        std::memcpy(&u, &x[k], 4);
        packed |= (u >> 31) << (k - byte);
      }
      bits[byte / 8] = static_cast<uint8_t>(packed);
    }
  }
}

absl::Status DecodeOneBit(absl::string_view in, size_t n, float* out) {
  if (in.size() != OneBitBytes(n)) {
    return Bad(absl::StrCat("ONEBIT of ", n, " elements is ", OneBitBytes(n),
                            " bytes, got ", in.size()));
  }
  const size_t blocks = Blocks(n);
  const uint8_t* bits =
      reinterpret_cast<const uint8_t*>(in.data()) + blocks * 2;
  if (n % 8 != 0 && (bits[n / 8] >> (n % 8)) != 0) {
    return Bad("ONEBIT has bits set past its elements");
  }
  for (size_t b = 0; b < blocks; ++b) {
    uint16_t half;
    std::memcpy(&half, in.data() + b * 2, 2);
    const float scale = Bf16ToFloat(half);
    if (scale < 0) {
      return Bad(absl::StrCat("ONEBIT block ", b, " has scale ", scale));
    }
    const size_t end = std::min(n, (b + 1) * kOneBitBlock);
    for (size_t i = b * kOneBitBlock; i < end; ++i) {
      out[i] = ((bits[i / 8] >> (i % 8)) & 1) ? -scale : scale;
    }
  }
  return absl::OkStatus();
}

size_t TopKCount(size_t n, double ratio) {
  const double k = std::ceil(ratio * static_cast<double>(n));
  return std::clamp<size_t>(static_cast<size_t>(k), n == 0 ? 0 : 1, n);
}

void EncodeTopK(const float* x, size_t n, size_t k, std::string* out,
                float* decoded) {
  k = std::min(k, n);
  std::fill(decoded, decoded + n, 0.0f);
  out->resize(8 * k);
  if (k == 0) return;
  // The k-th largest magnitude; then every element above it, and the ties
  // in index order until there are k.
  const float kth = KthMagnitude(x, n, k);
  auto magnitude = [x](size_t i) { return Magnitude(x[i]); };
  size_t above = 0;
  for (size_t i = 0; i < n; ++i) above += magnitude(i) > kth;
  size_t ties = k - above, taken = 0;
  for (size_t i = 0; i < n && taken < k; ++i) {
    const float a = magnitude(i);
    if (a < kth || (a == kth && ties == 0)) continue;
    if (a == kth) --ties;
    const uint32_t index = static_cast<uint32_t>(i);
    std::memcpy(out->data() + 8 * taken, &index, 4);
    std::memcpy(out->data() + 8 * taken + 4, &x[i], 4);
    decoded[i] = x[i];
    ++taken;
  }
}

absl::Status DecodeTopK(absl::string_view in, size_t n, float* out) {
  if (in.size() % 8 != 0 || in.size() / 8 > n) {
    return Bad(absl::StrCat("TOPK of ", n, " elements cannot be ", in.size(),
                            " bytes"));
  }
  std::fill(out, out + n, 0.0f);
  int64_t last = -1;
  for (size_t j = 0; j < in.size() / 8; ++j) {
    uint32_t i;
    float v;
    std::memcpy(&i, in.data() + 8 * j, 4);
    std::memcpy(&v, in.data() + 8 * j + 4, 4);
    if (static_cast<int64_t>(i) <= last || i >= n) {
      return Bad(absl::StrCat("TOPK index ", i, " after ", last, " of ", n));
    }
    out[i] = v;
    last = i;
  }
  return absl::OkStatus();
}

}  // namespace strata
