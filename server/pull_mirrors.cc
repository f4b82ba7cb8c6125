#include "server/pull_mirrors.h"

#include <cstring>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/compress.h"

namespace strata {
namespace {

// Writes out[i] = a[i] - b[i] for i < n; whether every difference is
// finite, by the exponent bits (one pass, and it vectorizes).
bool FiniteDifference(const float* a, const float* b, size_t n, float* out) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = a[i] - b[i];
    uint32_t u;
    std::memcpy(&u, &out[i], 4);
    bad |= (u & 0x7f800000u) == 0x7f800000u;
  }
  return bad == 0;
}

// Whether every bf16 scale of an ONEBIT encoding of n elements is finite
// (a block's sum can overflow where its values do not).
bool FiniteScales(const std::string& encoded, size_t n) {
  const size_t blocks = (n + kOneBitBlock - 1) / kOneBitBlock;
  uint32_t bad = 0;
  for (size_t b = 0; b < blocks; ++b) {
    uint16_t half;
    std::memcpy(&half, encoded.data() + 2 * b, 2);
    bad |= (half & 0x7f80u) == 0x7f80u;
  }
  return bad == 0;
}

}  // namespace

PullMirrors::PullMirrors(GradientPool& scratch) : scratch_(scratch) {
  absl::BitGen gen;
  // Far from 0 (no base) and from wrapping around.
  next_seq_ =
      absl::Uniform<uint64_t>(gen, uint64_t{1} << 32, uint64_t{1} << 62);
}

std::shared_ptr<PullMirrors::Mirror> PullMirrors::Find(const Key& key,
                                                       size_t n) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Mirror>& m = mirrors_[key];
  if (m == nullptr || m->w.size() != n) {
    if (m != nullptr) floats_ -= m->w.size();
    m = std::make_shared<Mirror>();
    m->w.resize(n);  // its size fixed from here on
    floats_ += n;
  }
  return m;
}

void PullMirrors::Drop(const Key& key, const std::shared_ptr<Mirror>& m) {
  absl::MutexLock lock(&mu_);
  auto it = mirrors_.find(key);
  if (it == mirrors_.end() || it->second != m) return;
  floats_ -= m->w.size();
  mirrors_.erase(it);
}

absl::StatusOr<PullMirrors::Served> PullMirrors::Rebase(
    Mirror& m, const float* w, size_t n, uint64_t generation,
    absl::FunctionRef<char*(size_t)> alloc) {
  Served s;
  s.bytes = n * sizeof(float);
  char* out = alloc(s.bytes);
  if (out == nullptr) {
    return absl::InvalidArgumentError("no space for the pull's weights");
  }
  std::memcpy(out, w, s.bytes);
  std::memcpy(m.w.data(), w, s.bytes);
  m.generation = generation;
  m.seq = s.seq = next_seq_.fetch_add(1);
  return s;
}

absl::StatusOr<PullMirrors::Served> PullMirrors::Serve(
    uint64_t member, const v1::PullRequest& req, const float* w, size_t n,
    uint64_t generation, absl::FunctionRef<bool(uint64_t)> live,
    absl::FunctionRef<char*(size_t)> alloc) {
  const bool topk = req.dtype() == v1::DTYPE_TOPK;
  if (topk && !(req.topk_ratio() > 0 && req.topk_ratio() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a TOPK pull's topk_ratio is in (0, 1], not ", req.topk_ratio()));
  }
  const Key key{member, req.chunk_id()};
  const std::shared_ptr<Mirror> m = Find(key, n);
  // After Find, without its lock: a view that dropped the member was
  // published before its Retain, so a copy made after that Retain (by a
  // pull that waited at the gate through the change) is seen here and
  // dropped, and one made before it was dropped by it.
  if (!live(member)) {
    Drop(key, m);
    return absl::UnavailableError(
        absl::StrCat("member ", member,
                     " is not a live worker in this server's view: "
                     "compressed pulls are for live workers"));
  }
  // A rolled-back chunk starts again from the whole weights: a delta from
  // the copy would bring the worker back only over many pulls.
  if (req.delta_base() == 0 || req.delta_base() != m->seq ||
      m->generation != generation) {
    return Rebase(*m, w, n, generation, alloc);
  }
  // delta = w - m, then m += D(C(delta)): the worker's own additions. A
  // delta or a decoding that is not finite (an overflow) would poison both
  // copies: the whole weights instead.
  std::vector<float> delta = scratch_.Take(n), decoded = scratch_.Take(n);
  absl::Cleanup give_back = [&] {
    scratch_.Give(std::move(delta));
    scratch_.Give(std::move(decoded));
  };
  // Small (1/25 of the chunk for ONEBIT): kept per thread.
  thread_local std::string encoded;
  // TOPK decodes to the delta's own values; ONEBIT to its blocks' scales.
  if (!FiniteDifference(w, m->w.data(), n, delta.data())) {
    return Rebase(*m, w, n, generation, alloc);
  }
  if (topk) {
    EncodeTopK(delta.data(), n, TopKCount(n, req.topk_ratio()), &encoded,
               decoded.data());
  } else {
    encoded.resize(OneBitBytes(n));
    EncodeOneBit(delta.data(), n, encoded.data(), decoded.data());
  }
  if (!topk && !FiniteScales(encoded, n)) {
    return Rebase(*m, w, n, generation, alloc);
  }
  Served s;
  s.dtype = req.dtype();
  s.base = m->seq;
  s.bytes = encoded.size();
  char* out = alloc(s.bytes);
  if (out == nullptr) {
    return absl::InvalidArgumentError("no space for the pull's delta");
  }
  std::memcpy(out, encoded.data(), s.bytes);
  for (size_t i = 0; i < n; ++i) m->w[i] += decoded[i];
  m->seq = s.seq = next_seq_.fetch_add(1);
  return s;
}

void PullMirrors::Retain(const std::function<bool(uint64_t)>& live) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(mirrors_, [&](const auto& kv) {
    if (live(kv.first.first)) return false;
    floats_ -= kv.second->w.size();
    return true;
  });
}

std::vector<float> PullMirrors::CopyOf(uint64_t member, uint64_t chunk_id) {
  absl::MutexLock lock(&mu_);
  auto it = mirrors_.find(Key{member, chunk_id});
  if (it == mirrors_.end() || it->second->seq == 0) return {};
  return it->second->w;
}

uint64_t PullMirrors::floats() const {
  absl::MutexLock lock(&mu_);
  return floats_;
}

}  // namespace strata
