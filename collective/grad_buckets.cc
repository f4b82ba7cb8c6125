#include "collective/grad_buckets.h"

#include <algorithm>

namespace strata {

GradBuckets::GradBuckets(Communicator* comm, size_t bucket_bytes,
                         size_t in_place_bytes)
    : comm_(comm),
      bucket_floats_(bucket_bytes / sizeof(float)),
      alone_floats_(std::min(bucket_bytes, in_place_bytes) / sizeof(float)) {}

GradBuckets::~GradBuckets() {
  for (auto& w : works_) (void)w->Wait();
}

void GradBuckets::Start(absl::Span<float> data) {
  works_.push_back(comm_->AllReduceAsync(data, ReduceOp::kSum));
}

void GradBuckets::Add(float* g, size_t n) {
  if (n == 0) return;
  if (n >= alone_floats_) {
    Start(absl::MakeSpan(g, n));  // alone, in place
    return;
  }
  if (open_ && buckets_[used_ - 1]->data.size() + n > bucket_floats_) Flush();
  if (!open_) {
    if (used_ == buckets_.size())
      buckets_.push_back(std::make_unique<Bucket>());
    Bucket& b = *buckets_[used_++];
    b.data.clear();
    b.parts.clear();
    b.data.reserve(bucket_floats_);  // never reallocated while in flight
    open_ = true;
  }
  Bucket& b = *buckets_[used_ - 1];
  b.data.insert(b.data.end(), g, g + n);
  b.parts.emplace_back(g, n);
  if (b.data.size() >= bucket_floats_) Flush();
}

void GradBuckets::Flush() {
  if (!open_) return;
  open_ = false;
  Start(absl::MakeSpan(buckets_[used_ - 1]->data));
}

absl::Status GradBuckets::Wait() {
  absl::Status first;
  for (auto& w : works_) first.Update(w->Wait());
  works_.clear();
  if (first.ok()) {
    for (size_t i = 0; i < used_; ++i) {
      const Bucket& b = *buckets_[i];
      const float* from = b.data.data();
      for (const auto& [g, n] : b.parts) {
        std::copy_n(from, n, g);
        from += n;
      }
    }
  }
  used_ = 0;
  open_ = false;
  return first;
}

}  // namespace strata
