// The Communicator contract, run on both implementations: the in-process
// group and Gloo over loopback TCP (ranks as threads of this process,
// addresses exchanged through Gloo's in-memory store), for 1 to 4 ranks.
#include "collective/communicator.h"

#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/gloo_communicator.h"
#include "collective/inproc_communicator.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

enum class Backend { kInProc, kGloo };

struct Param {
  Backend backend;
  int size;
};

std::string Name(const testing::TestParamInfo<Param>& info) {
  return absl::StrCat(
      info.param.backend == Backend::kInProc ? "InProc" : "Gloo",
      info.param.size);
}

std::vector<std::unique_ptr<Communicator>> MakeGroup(
    Backend backend, int size, CommunicatorOptions options = {}) {
  if (backend == Backend::kInProc) {
    auto comms = MakeInProcGroup(size, options);
    EXPECT_TRUE(comms.ok()) << comms.status();
    return comms.ok() ? *std::move(comms)
                      : std::vector<std::unique_ptr<Communicator>>();
  }
  gloo::rendezvous::HashStore store;
  std::vector<std::unique_ptr<Communicator>> comms(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions gloo;
      gloo.rank = r;
      gloo.size = size;
      gloo.connect_timeout = absl::Seconds(30);
      gloo.comm = options;
      auto comm = ConnectGloo(gloo, store);
      EXPECT_TRUE(comm.ok()) << comm.status();
      if (comm.ok()) comms[r] = *std::move(comm);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Runs fn(rank's communicator) on one thread per rank.
void OnEveryRank(std::vector<std::unique_ptr<Communicator>>& comms,
                 const std::function<void(Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (auto& comm : comms) {
    ASSERT_NE(comm, nullptr);
    threads.emplace_back([&fn, c = comm.get()] { fn(*c); });
  }
  for (auto& t : threads) t.join();
}

// Small integers, so sums are exact in fp32 whatever the order.
float Value(int rank, size_t i) { return float(rank * 1000 + int(i % 4096)); }

std::vector<size_t> UnevenCounts(int size) {
  std::vector<size_t> counts;
  for (int r = 0; r < size; ++r) counts.push_back(r == 1 ? 0 : 1000 * r + 3);
  return counts;
}

class CommunicatorTest : public testing::TestWithParam<Param> {
 protected:
  std::vector<std::unique_ptr<Communicator>> Group(
      CommunicatorOptions options = {}) {
    return MakeGroup(GetParam().backend, GetParam().size, options);
  }
};

TEST_P(CommunicatorTest, AllReduceSumsEveryRanksValues) {
  auto comms = Group();
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{300001}}) {
    OnEveryRank(comms, [n](Communicator& c) {
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = Value(c.rank(), i);
      ASSERT_TRUE(c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum).ok());
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < c.size(); ++r) want += Value(r, i);
        ASSERT_EQ(data[i], want) << "element " << i << " on rank " << c.rank();
      }
    });
  }
}

TEST_P(CommunicatorTest, AllReduceMaxTakesTheLargest) {
  auto comms = Group();
  OnEveryRank(comms, [](Communicator& c) {
    std::vector<float> data = {float(c.rank()), -float(c.rank()), 5};
    ASSERT_TRUE(c.AllReduce(absl::MakeSpan(data), ReduceOp::kMax).ok());
    EXPECT_EQ(data, (std::vector<float>{float(c.size() - 1), 0, 5}));
  });
}

TEST_P(CommunicatorTest, ReduceScatterGivesEachRankTheSumOfItsBlock) {
  auto comms = Group();
  const std::vector<size_t> counts = UnevenCounts(GetParam().size);
  size_t total = 0;
  for (size_t c : counts) total += c;
  OnEveryRank(comms, [&](Communicator& c) {
    std::vector<float> in(total);
    for (size_t i = 0; i < total; ++i) in[i] = Value(c.rank(), i);
    std::vector<float> out(counts[c.rank()], -1);
    ASSERT_TRUE(
        c.ReduceScatter(in, counts, absl::MakeSpan(out), ReduceOp::kSum).ok());
    size_t offset = 0;
    for (int r = 0; r < c.rank(); ++r) offset += counts[r];
    for (size_t i = 0; i < out.size(); ++i) {
      float want = 0;
      for (int r = 0; r < c.size(); ++r) want += Value(r, offset + i);
      ASSERT_EQ(out[i], want) << "element " << i << " on rank " << c.rank();
    }
  });
}

TEST_P(CommunicatorTest, AllGatherConcatenatesInRankOrder) {
  auto comms = Group();
  const std::vector<size_t> counts = UnevenCounts(GetParam().size);
  size_t total = 0;
  for (size_t c : counts) total += c;
  OnEveryRank(comms, [&](Communicator& c) {
    std::vector<float> in(counts[c.rank()]);
    for (size_t i = 0; i < in.size(); ++i) in[i] = Value(c.rank(), i);
    std::vector<float> out(total, -1);
    ASSERT_TRUE(c.AllGather(in, counts, absl::MakeSpan(out)).ok());
    size_t at = 0;
    for (int r = 0; r < c.size(); ++r) {
      for (size_t i = 0; i < counts[r]; ++i, ++at) {
        ASSERT_EQ(out[at], Value(r, i)) << "block " << r << " element " << i;
      }
    }
  });
}

// Elements rank `from` sends rank `to` in the all-to-all test: uneven,
// some pairs none, one pair over a Gloo segment.
size_t PairCount(int from, int to) {
  if ((from + 2 * to) % 3 == 1) return 0;
  return from == 0 && to == 1 ? 300001 : 7 * from + 3 * to + 1;
}

// What `from` sends `to` at element i: distinct for every pair and i.
float PairValue(int from, int to, size_t i) {
  return float(from * 4000000 + to * 1000000 + int(i % 999983));
}

TEST_P(CommunicatorTest, AllToAllDeliversEachBlockToItsRank) {
  auto comms = Group();
  OnEveryRank(comms, [](Communicator& c) {
    std::vector<size_t> send(c.size()), recv(c.size());
    for (int q = 0; q < c.size(); ++q) {
      send[q] = PairCount(c.rank(), q);
      recv[q] = PairCount(q, c.rank());
    }
    std::vector<float> in;
    for (int q = 0; q < c.size(); ++q) {
      for (size_t i = 0; i < send[q]; ++i) {
        in.push_back(PairValue(c.rank(), q, i));
      }
    }
    size_t total = 0;
    for (size_t n : recv) total += n;
    std::vector<float> out(total, -1);
    ASSERT_TRUE(c.AllToAll(in, send, absl::MakeSpan(out), recv).ok());
    size_t at = 0;
    for (int q = 0; q < c.size(); ++q) {
      for (size_t i = 0; i < recv[q]; ++i, ++at) {
        ASSERT_EQ(out[at], PairValue(q, c.rank(), i))
            << "from rank " << q << " element " << i << " on rank " << c.rank();
      }
    }
  });
}

TEST_P(CommunicatorTest, BroadcastCopiesTheRootsData) {
  auto comms = Group();
  OnEveryRank(comms, [](Communicator& c) {
    const int root = c.size() - 1;
    std::vector<float> data(5000, float(c.rank()));
    ASSERT_TRUE(c.Broadcast(absl::MakeSpan(data), root).ok());
    EXPECT_EQ(data, std::vector<float>(5000, float(root)));
    EXPECT_TRUE(c.Barrier().ok());
  });
}

TEST_P(CommunicatorTest, SendsMatchRecvsByTagInAnyOrder) {
  if (GetParam().size < 2) GTEST_SKIP() << "needs a peer";
  auto comms = Group();
  OnEveryRank(comms, [](Communicator& c) {
    const int next = (c.rank() + 1) % c.size();
    const int prev = (c.rank() + c.size() - 1) % c.size();
    std::vector<float> first(100, float(c.rank())), second(3, -float(c.rank()));
    auto s1 = c.SendAsync(first, next, 1);
    auto s2 = c.SendAsync(second, next, 2);
    std::vector<float> got2(3), got1(100);
    ASSERT_TRUE(c.Recv(absl::MakeSpan(got2), prev, 2).ok());
    ASSERT_TRUE(c.Recv(absl::MakeSpan(got1), prev, 1).ok());
    ASSERT_TRUE(s1->Wait().ok());
    ASSERT_TRUE(s2->Wait().ok());
    EXPECT_EQ(got1, std::vector<float>(100, float(prev)));
    EXPECT_EQ(got2, std::vector<float>(3, -float(prev)));
  });
}

TEST_P(CommunicatorTest, AsyncCollectivesRunInIssueOrder) {
  auto comms = Group();
  OnEveryRank(comms, [](Communicator& c) {
    std::vector<std::vector<float>> bufs(3, std::vector<float>(1000));
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 3; ++k) {
      for (float& x : bufs[k]) x = float(k + c.rank());
      works.push_back(
          c.AllReduceAsync(absl::MakeSpan(bufs[k]), ReduceOp::kSum));
    }
    for (int k = 2; k >= 0; --k) ASSERT_TRUE(works[k]->Wait().ok());
    for (int k = 0; k < 3; ++k) {
      const float want = float(k * c.size() + c.size() * (c.size() - 1) / 2);
      EXPECT_EQ(bufs[k], std::vector<float>(1000, want)) << "buffer " << k;
    }
  });
}

TEST_P(CommunicatorTest, BadArgumentsFailTheCallOnly) {
  auto comms = Group();
  Communicator& c = *comms[0];
  std::vector<float> data(10);
  std::vector<float> out(1);
  EXPECT_EQ(
      c.ReduceScatter(data, {10}, absl::MakeSpan(out), ReduceOp::kSum).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      c.AllGather(data, std::vector<size_t>(c.size(), 1), absl::MakeSpan(data))
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Broadcast(absl::MakeSpan(data), c.size()).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<size_t> ten(c.size(), 0);
  ten[0] = 10;
  EXPECT_EQ(c.AllToAll(data, ten, absl::MakeSpan(out),
                       std::vector<size_t>(c.size(), 0))
                .code(),
            absl::StatusCode::kInvalidArgument)
      << "the counts do not sum to the output's size";
  EXPECT_EQ(c.AllToAll(data, {10}, absl::MakeSpan(data),
                       std::vector<size_t>(c.size() + 1, 0))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Send(data, 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Recv(absl::MakeSpan(data), -1, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.health().ok()) << c.health();
  // The group still works.
  OnEveryRank(comms, [](Communicator& c) {
    std::vector<float> one = {1};
    ASSERT_TRUE(c.AllReduce(absl::MakeSpan(one), ReduceOp::kSum).ok());
    EXPECT_EQ(one[0], float(c.size()));
  });
}

TEST_P(CommunicatorTest, APeerThatLeavesFailsTheOthersAndTheyStayFailed) {
  if (GetParam().size < 2) GTEST_SKIP() << "needs a peer";
  CommunicatorOptions options;
  options.timeout = absl::Seconds(20);
  auto comms = Group(options);
  comms.back().reset();  // as a process's death closes its connections
  comms.pop_back();
  OnEveryRank(comms, [](Communicator& c) {
    std::vector<float> data(1000, 1);
    absl::Status status = c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
    EXPECT_FALSE(status.ok());
    EXPECT_TRUE(absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status))
        << status;
    EXPECT_FALSE(c.health().ok());
    absl::Status next = c.Barrier();
    EXPECT_TRUE(absl::IsFailedPrecondition(next)) << next;
    EXPECT_TRUE(absl::IsFailedPrecondition(
        c.Recv(absl::MakeSpan(data), (c.rank() + 1) % c.size(), 1)))
        << "point-to-point after a failure";
  });
}

TEST_P(CommunicatorTest, APeerThatNeverArrivesTimesOut) {
  if (GetParam().size < 2) GTEST_SKIP() << "needs a peer";
  CommunicatorOptions options;
  options.timeout = absl::Milliseconds(300);
  auto comms = Group(options);
  std::vector<float> data(10, 1);
  absl::Status status =
      comms[0]->AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  status = comms[0]->Recv(absl::MakeSpan(data), 1, 9);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
}

TEST_P(CommunicatorTest, AbortEndsARunningCollective) {
  if (GetParam().size < 2) GTEST_SKIP() << "needs a peer";
  CommunicatorOptions options;
  options.timeout = absl::Seconds(120);  // far past the test's own limit
  auto comms = Group(options);
  std::vector<float> data(10, 1);
  auto work = comms[0]->AllReduceAsync(absl::MakeSpan(data), ReduceOp::kSum);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(work->done());
  comms[0]->Abort();
  absl::Status status = work->Wait();
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::IsAborted(comms[0]->health())) << comms[0]->health();
}

INSTANTIATE_TEST_SUITE_P(
    Backends, CommunicatorTest,
    testing::Values(Param{Backend::kInProc, 1}, Param{Backend::kInProc, 2},
                    Param{Backend::kInProc, 3}, Param{Backend::kInProc, 4},
                    Param{Backend::kGloo, 1}, Param{Backend::kGloo, 2},
                    Param{Backend::kGloo, 3}, Param{Backend::kGloo, 4}),
    Name);

TEST(InProcCommunicator, RanksThatDisagreeFailAlike) {
  auto comms = MakeInProcGroup(2);
  ASSERT_TRUE(comms.ok());
  OnEveryRank(*comms, [](Communicator& c) {
    std::vector<float> data(c.rank() == 0 ? 4 : 5, 1);
    absl::Status status = c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  });
}

TEST(InProcCommunicator, AllToAllCountsThatDisagreeFailEveryRank) {
  auto comms = MakeInProcGroup(2);
  ASSERT_TRUE(comms.ok());
  OnEveryRank(*comms, [](Communicator& c) {
    // Rank 0 sends rank 1 three elements; rank 1 expects two.
    const bool zero = c.rank() == 0;
    const std::vector<size_t> send =
        zero ? std::vector<size_t>{1, 3} : std::vector<size_t>{2, 1};
    const std::vector<size_t> recv =
        zero ? std::vector<size_t>{1, 2} : std::vector<size_t>{2, 1};
    std::vector<float> in(zero ? 4 : 3, 1), out(3);
    absl::Status status = c.AllToAll(in, send, absl::MakeSpan(out), recv);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  });
}

TEST(InProcCommunicator, ReductionsAreBitIdenticalOnEveryRank) {
  auto comms = MakeInProcGroup(3);
  ASSERT_TRUE(comms.ok());
  std::vector<std::vector<float>> results(3);
  OnEveryRank(*comms, [&](Communicator& c) {
    std::vector<float> data(999);
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = 0.1f * float(i) / float(c.rank() + 3);
    }
    ASSERT_TRUE(c.AllReduce(absl::MakeSpan(data), ReduceOp::kSum).ok());
    results[c.rank()] = data;
  });
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(InProcCommunicator, RejectsAnEmptyGroup) {
  EXPECT_TRUE(absl::IsInvalidArgument(MakeInProcGroup(0).status()));
}

TEST(GlooCommunicator, RejectsARankOutsideTheGroup) {
  gloo::rendezvous::HashStore store;
  GlooOptions options;
  options.rank = 2;
  options.size = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectGloo(options, store).status()));
}

TEST(GlooCommunicator, AnAddressThatIsNotThisHostsIsUnavailable) {
  gloo::rendezvous::HashStore store;
  GlooOptions options;
  options.hostname = "no-such-host.invalid";
  absl::Status status = ConnectGloo(options, store).status();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
}

// Gloo writes to a dead peer's socket raise SIGPIPE, whose default action
// ends the process: once a group is formed, the process ignores it, so a
// peer's death fails the collective instead (the test above, which died
// of SIGPIPE before this).
TEST(GlooCommunicator, AGroupMakesTheProcessIgnoreSigpipe) {
  // (ctest runs each test in a process of its own, at the default.)
  auto group = MakeLocalGlooGroup(2);
  ASSERT_TRUE(group.ok()) << group.status();
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
}

}  // namespace
}  // namespace strata
