// GradBuckets over the in-process group: the sums equal one all-reduce per
// tensor, bit for bit (the group adds in rank order either way), with
// buckets of several sizes, tensors larger than a bucket, and across steps
// that reuse the buckets; the number of collectives is what the bucket
// size implies; a failed collective fails Wait.
#include "collective/grad_buckets.h"

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "collective/inproc_communicator.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

// Tensor sizes in floats, a GPT's mix: small vectors and larger matrices.
const std::vector<size_t> kSizes = {48, 48, 4096, 48, 1000, 3, 2048, 48, 700};

std::vector<std::vector<float>> Grads(int rank, int step) {
  std::vector<std::vector<float>> g;
  for (size_t t = 0; t < kSizes.size(); ++t) {
    std::vector<float> v(kSizes[t]);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = std::sin(0.37f * i + 1.3f * t + 0.7f * rank + 0.11f * step);
    g.push_back(std::move(v));
  }
  return g;
}

template <typename Fn>
void OnRanks(int n, Fn fn) {
  auto comms = MakeInProcGroup(n);
  ASSERT_TRUE(comms.ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { fn(*(*comms)[r]); });
  }
  for (auto& t : threads) t.join();
}

TEST(GradBuckets, SumLikeOneAllReducePerTensor) {
  // Bytes per bucket, bytes from which a tensor goes alone, and the
  // collectives that gives per step.
  struct Case {
    size_t bucket, alone;
    int collectives;
  };
  const std::vector<Case> cases = {
      {0, 1 << 20, 9},         // one per tensor
      {1 << 20, 1 << 20, 1},   // everything in one bucket
      {4096 * 4, 1 << 20, 2},  // 4096 alone, the rest in one bucket
      {2000 * 4, 1 << 20, 3},  // 4096 and 2048 alone, the rest
      {400 * 4, 1 << 20, 5},   // 4096, 1000, 2048, 700 alone; the rest
      {160 * 4, 1 << 20, 6},   // 4096, 1000, 2048, 700 alone;
                               // [48,48,48,3], [48]
      {1 << 20, 1024 * 4, 3},  // 4096 and 2048 alone, the rest
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(testing::Message()
                 << k.bucket << " bytes per bucket, " << k.alone << " alone");
    const int want = k.collectives;
    OnRanks(3, [&](Communicator& c) {
      GradBuckets buckets(&c, k.bucket, k.alone);
      for (int step = 0; step < 2; ++step) {
        std::vector<std::vector<float>> g = Grads(c.rank(), step);
        std::vector<std::vector<float>> want_sums = Grads(c.rank(), step);
        for (auto& v : want_sums) {
          ASSERT_TRUE(c.AllReduce(absl::MakeSpan(v), ReduceOp::kSum).ok());
        }
        for (auto& v : g) buckets.Add(v.data(), v.size());
        buckets.Flush();
        EXPECT_EQ(buckets.collectives(), want);
        ASSERT_TRUE(buckets.Wait().ok());
        EXPECT_EQ(g, want_sums);
      }
    });
  }
}

TEST(GradBuckets, AFailedCollectiveFailsWait) {
  OnRanks(2, [&](Communicator& c) {
    GradBuckets buckets(&c, 1 << 20);
    std::vector<std::vector<float>> g = Grads(c.rank(), 0);
    for (auto& v : g) buckets.Add(v.data(), v.size());
    if (c.rank() == 1) c.Abort();  // a peer that goes away mid-step
    buckets.Flush();
    EXPECT_FALSE(buckets.Wait().ok());
  });
}

}  // namespace
}  // namespace strata
