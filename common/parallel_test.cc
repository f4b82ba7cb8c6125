#include "common/parallel.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(ParallelFor, CoversEveryIndexOnce) {
  for (int64_t n : {0, 1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(n);
    ParallelFor(n, 3, [&](int, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1);
  }
}

TEST(ParallelFor, ManyQuickCallsFromSeveralThreads) {
  auto caller = [](int64_t n, int64_t* total) {
    for (int rep = 0; rep < 2000; ++rep) {
      std::vector<int64_t> sums(NumChunks(n, 1), 0);
      ParallelFor(n, 1, [&](int chunk, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sums[chunk] += i;
      });
      for (int64_t s : sums) *total += s;
    }
  };
  int64_t a = 0, b = 0;
  std::thread t1(caller, 10, &a), t2(caller, 100, &b);
  t1.join();
  t2.join();
  EXPECT_EQ(a, 2000 * 45);
  EXPECT_EQ(b, 2000 * 4950);
}

TEST(ParallelFor, OneThreadRunsEveryChunkOnTheCaller) {
  const int saved = NumThreads();
  SetNumThreads(1);
  EXPECT_EQ(NumThreads(), 1);
  EXPECT_EQ(NumChunks(100, 1), 1);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<int> seen(100, 0);
  bool all_on_caller = true;
  ParallelFor(100, 1, [&](int, int64_t b, int64_t e) {
    all_on_caller &= std::this_thread::get_id() == caller;
    for (int64_t i = b; i < e; ++i) ++seen[i];
  });
  SetNumThreads(saved);
  EXPECT_TRUE(all_on_caller);
  EXPECT_EQ(seen, std::vector<int>(100, 1));
}

TEST(ParallelFor, NestedCallsRunInline) {
  std::atomic<int> inner{0};
  ParallelFor(8, 1, [&](int, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const std::thread::id outer = std::this_thread::get_id();
      ParallelFor(10, 1, [&](int, int64_t b2, int64_t e2) {
        EXPECT_EQ(std::this_thread::get_id(), outer);
        inner += static_cast<int>(e2 - b2);
      });
    }
  });
  EXPECT_EQ(inner.load(), 80);
}

}  // namespace
}  // namespace strata
