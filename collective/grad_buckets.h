// Gradient buckets for data-parallel all-reduce, as PyTorch DDP's: the
// small gradients backward finishes are copied, in that order, into flat
// buckets of about `bucket_bytes`; each full bucket is all-reduced on the
// communicator's thread while backward goes on, and Wait copies the sums
// back. Few collectives instead of one per tensor: a GPT's LayerNorm and
// bias tensors are a few KiB each, and each collective costs a round trip
// around the ring per rank. Large tensors are all-reduced alone, in place:
// copying them in and out would cost more than the collective it saves
// (measured: copying every tensor of GPT-2 124M into 25 MiB buckets made
// its all-reduce slower than one per tensor; docs/BENCHMARKS.md).
//
// Every rank must add the same tensor sizes in the same order (the same
// model reports its gradients in the same order on every rank), so the
// buckets, and the collectives, match.
//
// Usage, per step:
//   GradBuckets buckets(comm, 4 << 20);
//   ... as each gradient is final: buckets.Add(g, n);
//   buckets.Flush();
//   STRATA_RETURN_IF_ERROR(buckets.Wait());  // g now holds the sums
#ifndef STRATA_COLLECTIVE_GRAD_BUCKETS_H_
#define STRATA_COLLECTIVE_GRAD_BUCKETS_H_

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "collective/communicator.h"

namespace strata {

class GradBuckets {
 public:
  // Tensors of min(bucket_bytes, in_place_bytes) or more are all-reduced
  // alone, in place; bucket_bytes 0: every tensor is. `comm` must outlive
  // the buckets' collectives (until Wait).
  GradBuckets(Communicator* comm, size_t bucket_bytes,
              size_t in_place_bytes = size_t{1} << 20);
  ~GradBuckets();  // waits for collectives still running
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Gradient g[0, n) is final: a large one's all-reduce starts at once, in
  // place; a small one joins the open bucket, which is started once it
  // holds bucket_bytes (or at Flush). g must stay valid until Wait.
  void Add(float* g, size_t n);
  // Starts the open bucket's all-reduce, if it holds anything.
  void Flush();
  // Waits for every collective started, then copies the sums back into the
  // gradients; the first error (the gradients are then unspecified). Ready
  // for the next step after it returns.
  absl::Status Wait();

  // Collectives started since the last Wait.
  int collectives() const { return static_cast<int>(works_.size()); }

 private:
  struct Bucket {
    std::vector<float> data;
    std::vector<std::pair<float*, size_t>> parts;  // where the sums go
  };
  void Start(absl::Span<float> data);

  Communicator* const comm_;
  const size_t bucket_floats_;
  const size_t alone_floats_;  // tensors this long go alone
  // Buckets of this step (started ones and the open one, at the back);
  // kept across steps so their memory is reused.
  std::vector<std::unique_ptr<Bucket>> buckets_;
  size_t used_ = 0;  // buckets_ in use this step; the open one is last
  bool open_ = false;
  std::vector<std::shared_ptr<Work>> works_;
};

}  // namespace strata

#endif  // STRATA_COLLECTIVE_GRAD_BUCKETS_H_
