#include "client/error_feedback.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/bf16.h"
#include "common/compress.h"

namespace strata {

float* CarriedErrors::Get(int key, int64_t n) {
  absl::MutexLock lock(&mu_);
  if (key >= static_cast<int>(carried_.size())) carried_.resize(key + 1);
  std::unique_ptr<std::vector<float>>& e = carried_[key];
  if (e == nullptr) e = std::make_unique<std::vector<float>>();
  if (static_cast<int64_t>(e->size()) != n) e->assign(n, 0.0f);
  return e->data();  // stable: only Reset or another n replaces it
}

void Bf16ErrorFeedback::Encode(int key, const float* g, uint16_t* out,
                               int64_t n) {
  float* e = carried_.Get(key, n);
  // Branch-free, so it vectorizes (RoundBf16Bits). Where g + e is a NaN or
  // an infinity,
  // or rounds to one, the new error is not finite (NaN, or the difference
  // with an infinity): noted, and fixed in a second pass.
  uint32_t special = 0;
  for (int64_t k = 0; k < n; ++k) {
    const float want = g[k] + e[k];
    uint32_t u;
    std::memcpy(&u, &want, 4);
    const uint16_t r = RoundBf16Bits(u);
    out[k] = r;
    const uint32_t back_bits = static_cast<uint32_t>(r) << 16;
    float back;
    std::memcpy(&back, &back_bits, 4);
    const float err = want - back;  // exact (Sterbenz: within 2x of want)
    e[k] = err;
    uint32_t err_bits;
    std::memcpy(&err_bits, &err, 4);
    special |= static_cast<uint32_t>((err_bits & 0x7f800000u) == 0x7f800000u);
  }
  if (special == 0) return;
  // Rare: those values go out as plain FloatToBf16(g) (a NaN stays a NaN)
  // and carry nothing.
  for (int64_t k = 0; k < n; ++k) {
    if (!std::isfinite(e[k])) {
      out[k] = FloatToBf16(g[k]);
      e[k] = 0.0f;
    }
  }
}

std::vector<float> CarriedErrors::Copy(int key) {
  absl::MutexLock lock(&mu_);
  if (key >= static_cast<int>(carried_.size()) || carried_[key] == nullptr) {
    return {};
  }
  return *carried_[key];
}

void CarriedErrors::Reset() {
  absl::MutexLock lock(&mu_);
  carried_.clear();
}

void CarriedErrors::Reset(int key) {
  absl::MutexLock lock(&mu_);
  if (key < static_cast<int>(carried_.size()) && carried_[key] != nullptr) {
    std::fill(carried_[key]->begin(), carried_[key]->end(), 0.0f);
  }
}

void CompressedErrorFeedback::Accumulate(int key, const float* g, size_t n,
                                         std::vector<float>* out) {
  float* u = velocity_.Get(key, static_cast<int64_t>(n));
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    u[i] = momentum_ * u[i] + g[i];
    (*out)[i] = u[i];
  }
}

void CompressedErrorFeedback::Encode(int key, const float* g, int64_t n,
                                     std::string* out) {
  const size_t count = static_cast<size_t>(n);
  // Scratch kept per thread: a chunk's worth, reused push after push.
  thread_local std::vector<float> want, decoded, momentum;
  if (momentum_ > 0) {
    Accumulate(key, g, count, &momentum);
    g = momentum.data();  // compressed in the gradient's place
  }
  want.resize(count);
  decoded.resize(count);
  float* e = carried_.Get(key, n);
  // By the exponent bits, so the check vectorizes.
  uint32_t nonfinite = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t u;
    std::memcpy(&u, &g[i], 4);
    nonfinite |= (u & 0x7f800000u) == 0x7f800000u;
  }
  if (nonfinite != 0) {
    // Goes out as it is, to be refused; nothing carried into or out of it.
    std::fill(e, e + n, 0.0f);
  }
  for (size_t i = 0; i < count; ++i) want[i] = g[i] + e[i];
  if (dtype_ == v1::DTYPE_ONEBIT) {
    out->resize(OneBitBytes(count));
    EncodeOneBit(want.data(), count, out->data(), decoded.data());
  } else {
    EncodeTopK(want.data(), count, TopKCount(count, ratio_), out,
               decoded.data());
  }
  if (nonfinite != 0) {
    std::fill(e, e + n, 0.0f);
    if (momentum_ > 0) velocity_.Reset(key);
    return;
  }
  if (momentum_ > 0) {
    // Momentum factor masking: the elements sent start their momentum
    // again.
    float* u = velocity_.Get(key, n);
    for (size_t j = 0; j < out->size() / 8; ++j) {
      uint32_t index;
      std::memcpy(&index, out->data() + 8 * j, 4);
      u[index] = 0.0f;
    }
  }
  // A difference that is not finite (g + e overflowed, or its block's
  // sum did) carries nothing. A compare and a select: it vectorizes.
  constexpr float kMax = std::numeric_limits<float>::max();
  for (size_t i = 0; i < count; ++i) {
    const float err = want[i] - decoded[i];
    e[i] = std::fabs(err) <= kMax ? err : 0.0f;
  }
}

}  // namespace strata
