#include "client/pulled_copies.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/compress.h"
#include "common/status.h"

namespace strata {

PulledCopies::Copy& PulledCopies::Get(int chunk) {
  absl::MutexLock lock(&mu_);
  if (chunk >= static_cast<int>(copies_.size())) copies_.resize(chunk + 1);
  if (copies_[chunk] == nullptr) copies_[chunk] = std::make_unique<Copy>();
  return *copies_[chunk];
}

uint64_t PulledCopies::Base(int chunk) {
  Copy& c = Get(chunk);
  absl::MutexLock lock(&c.mu);
  return c.seq;
}

absl::Status PulledCopies::AddDelta(Copy& c, size_t n, v1::DType dtype,
                                    absl::string_view payload) {
  thread_local std::vector<float> delta;
  delta.resize(n);
  STRATA_RETURN_IF_ERROR(dtype == v1::DTYPE_ONEBIT
                             ? DecodeOneBit(payload, n, delta.data())
                             : DecodeTopK(payload, n, delta.data()));
  for (size_t i = 0; i < n; ++i) c.w[i] += delta[i];
  return absl::OkStatus();
}

absl::Status PulledCopies::Apply(int chunk, size_t n, v1::DType asked,
                                 const v1::PullResponse& resp,
                                 absl::string_view payload, float* dst) {
  Copy& c = Get(chunk);
  absl::MutexLock lock(&c.mu);
  absl::Status status;
  if (resp.dtype() == v1::DTYPE_F32) {
    if (payload.size() != n * sizeof(float) || resp.delta_seq() == 0) {
      status = absl::DataLossError(
          absl::StrCat("a compressed pull's whole weights are ", payload.size(),
                       " bytes for ", n, " elements, copy ", resp.delta_seq()));
    } else {
      c.w.resize(n);
      std::memcpy(c.w.data(), payload.data(), payload.size());
    }
  } else if (resp.dtype() != asked) {
    status = absl::DataLossError(absl::StrCat(
        "a compressed pull asked for dtype ", asked, ", got ", resp.dtype()));
  } else if (c.seq == 0 || resp.delta_base() != c.seq || c.w.size() != n) {
    status = absl::FailedPreconditionError(absl::StrCat(
        "a delta from copy ", resp.delta_base(), " of chunk ", chunk,
        ", which holds ", c.seq, ": pulls of one chunk overlapped"));
  } else if (absl::Status s = AddDelta(c, n, asked, payload); !s.ok()) {
    status = absl::DataLossError(s.message());
  }
  if (!status.ok()) {
    c.seq = 0;
    return status;
  }
  c.seq = resp.delta_seq();
  std::memcpy(dst, c.w.data(), n * sizeof(float));
  return absl::OkStatus();
}

void PulledCopies::Reset() {
  absl::MutexLock lock(&mu_);
  for (auto& c : copies_) {
    if (c == nullptr) continue;
    absl::MutexLock copy_lock(&c->mu);
    c->seq = 0;
  }
}

}  // namespace strata
