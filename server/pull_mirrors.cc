#include "server/pull_mirrors.h"

#include <cstring>
#include <string>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/compress.h"

namespace strata {

PullMirrors::PullMirrors() {
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

absl::StatusOr<PullMirrors::Served> PullMirrors::Rebase(
    Mirror& m, const float* w, size_t n,
    absl::FunctionRef<char*(size_t)> alloc) {
  Served s;
  s.bytes = n * sizeof(float);
  char* out = alloc(s.bytes);
  if (out == nullptr) {
    return absl::InvalidArgumentError("no space for the pull's weights");
  }
  std::memcpy(out, w, s.bytes);
  std::memcpy(m.w.data(), w, s.bytes);
  m.seq = s.seq = next_seq_.fetch_add(1);
  return s;
}

absl::StatusOr<PullMirrors::Served> PullMirrors::Serve(
    uint64_t member, const v1::PullRequest& req, const float* w, size_t n,
    absl::FunctionRef<char*(size_t)> alloc) {
  const bool topk = req.dtype() == v1::DTYPE_TOPK;
  if (topk && !(req.topk_ratio() > 0 && req.topk_ratio() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a TOPK pull's topk_ratio is in (0, 1], not ", req.topk_ratio()));
  }
  const std::shared_ptr<Mirror> m = Find({member, req.chunk_id()}, n);
  if (req.delta_base() == 0 || req.delta_base() != m->seq) {
    return Rebase(*m, w, n, alloc);
  }
  // delta = w - m, then m += D(C(delta)): the worker's own additions.
  thread_local std::vector<float> delta, decoded;
  delta.resize(n);
  decoded.resize(n);
  for (size_t i = 0; i < n; ++i) delta[i] = w[i] - m->w[i];
  Served s;
  s.dtype = req.dtype();
  s.base = m->seq;
  thread_local std::string topk_bytes;
  if (topk) {
    EncodeTopK(delta.data(), n, TopKCount(n, req.topk_ratio()), &topk_bytes,
               decoded.data());
    s.bytes = topk_bytes.size();
  } else {
    s.bytes = OneBitBytes(n);
  }
  char* out = alloc(s.bytes);
  if (out == nullptr) {
    return absl::InvalidArgumentError("no space for the pull's delta");
  }
  if (topk) {
    std::memcpy(out, topk_bytes.data(), s.bytes);
  } else {
    EncodeOneBit(delta.data(), n, out, decoded.data());
  }
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
