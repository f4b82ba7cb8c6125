// Two UCX workers in one process, held to UCX's TCP transport (the path
// between hosts): payloads arrive bit for bit, mismatched sizes and vanished
// peers fail their transfers instead of hanging, and cancelled receives
// leave their buffers alone.
#include "transport/ucx_node.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace strata {
namespace {

constexpr absl::Duration kLimit = absl::Seconds(30);

std::shared_ptr<UcxNode> MakeNode() {
  UcxNode::Options options;
  options.transports = "tcp";
  auto node = UcxNode::Create(options);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : nullptr;
}

// Two nodes, and an endpoint from the first to the second (null if
// either failed).
struct Pair {
  std::shared_ptr<UcxNode> a, b;
  std::shared_ptr<UcxEndpoint> ab;
};
Pair Connected() {
  Pair p{MakeNode(), MakeNode(), nullptr};
  if (p.a == nullptr || p.b == nullptr) return p;
  auto ab = p.a->Connect(p.b->address());
  EXPECT_TRUE(ab.ok()) << ab.status();
  if (ab.ok()) p.ab = *ab;
  return p;
}

std::vector<uint32_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint32_t>(i * 2654435761u + seed);
  return v;
}

TEST(UcxNode, PayloadsArriveBitForBitBothWays) {
  auto [a, b, ab] = Connected();
  ASSERT_TRUE(ab);
  auto ba = b->Connect(a->address());
  ASSERT_TRUE(ba.ok());
  // Small (eager) and large (rendezvous) payloads.
  for (size_t n : {size_t{16}, size_t{1} << 20, size_t{16} << 20}) {
    const std::vector<uint32_t> out = Pattern(n, 7);
    std::vector<uint32_t> in(n, 0);
    const uint64_t tag = (uint64_t{42} << 32) | n;
    // The send first, as a push's: it waits unmatched for the receive.
    auto send = ab->Send(out.data(), n * 4, tag);
    auto recv = b->Receive(in.data(), n * 4, tag);
    ASSERT_TRUE(recv->Wait(absl::Now() + kLimit).ok());
    ASSERT_TRUE(send->Wait(absl::Now() + kLimit).ok());
    EXPECT_EQ(in, out) << n;
    // The other way, the receive first, as a pull's.
    std::vector<uint32_t> back(n, 0);
    auto recv2 = a->Receive(back.data(), n * 4, tag + 1);
    auto send2 = (*ba)->Send(in.data(), n * 4, tag + 1);
    ASSERT_TRUE(recv2->Wait(absl::Now() + kLimit).ok());
    ASSERT_TRUE(send2->Wait(absl::Now() + kLimit).ok());
    EXPECT_EQ(back, out) << n;
  }
}

TEST(UcxNode, TagsKeepConcurrentPayloadsApart) {
  auto [a, b, ab] = Connected();
  ASSERT_TRUE(ab);
  constexpr int kPayloads = 8;
  constexpr size_t kN = 256 << 10;
  std::vector<std::vector<uint32_t>> out, in;
  std::vector<std::unique_ptr<UcxTransfer>> sends, recvs;
  for (int i = 0; i < kPayloads; ++i) {
    out.push_back(Pattern(kN, i));
    in.emplace_back(kN, 0);
  }
  for (int i = 0; i < kPayloads; ++i)
    sends.push_back(ab->Send(out[i].data(), kN * 4, 100 + i));
  // Received in the reverse order of their sends.
  for (int i = kPayloads - 1; i >= 0; --i)
    recvs.push_back(b->Receive(in[i].data(), kN * 4, 100 + i));
  for (auto& t : recvs) ASSERT_TRUE(t->Wait(absl::Now() + kLimit).ok());
  for (auto& t : sends) ASSERT_TRUE(t->Wait(absl::Now() + kLimit).ok());
  for (int i = 0; i < kPayloads; ++i) EXPECT_EQ(in[i], out[i]) << i;
}

TEST(UcxNode, AWrongSizeFailsTheReceive) {
  auto [a, b, ab] = Connected();
  ASSERT_TRUE(ab);
  std::vector<char> out(4096, 'x'), in(8192, 0);
  auto send = ab->Send(out.data(), out.size(), 5);
  auto recv = b->Receive(in.data(), in.size(), 5);  // expects more
  EXPECT_EQ(recv->Wait(absl::Now() + kLimit).code(),
            absl::StatusCode::kDataLoss);
  // The same with the short message there before its receive is posted
  // (UCX then completes the receive at once, without its callback).
  auto early = ab->Send(out.data(), out.size(), 7);
  ASSERT_TRUE(early->Wait(absl::Now() + kLimit).ok());
  absl::SleepFor(absl::Milliseconds(200));
  auto late = b->Receive(in.data(), in.size(), 7);
  EXPECT_EQ(late->Wait(absl::Now() + kLimit).code(),
            absl::StatusCode::kDataLoss);
  auto send2 = ab->Send(in.data(), in.size(), 6);
  auto recv2 = b->Receive(out.data(), out.size(), 6);  // room for less
  EXPECT_EQ(recv2->Wait(absl::Now() + kLimit).code(),
            absl::StatusCode::kDataLoss);
  send2->Abort();
}

TEST(UcxNode, ACancelledReceiveLeavesItsBufferAlone) {
  auto [a, b, ab] = Connected();
  ASSERT_TRUE(ab);
  std::vector<char> in(1 << 20, 'a');
  auto recv = b->Receive(in.data(), in.size(), 9);
  EXPECT_EQ(recv->Wait(absl::Now() + absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  recv->Abort();
  EXPECT_EQ(recv->Wait(absl::Now()).code(), absl::StatusCode::kCancelled);
  // A payload with that tag that comes later waits unmatched, and is
  // dropped with its session's others.
  std::vector<char> out(1 << 20, 'z');
  auto send = ab->Send(out.data(), out.size(), 9);
  EXPECT_EQ(in, std::vector<char>(1 << 20, 'a'));
  int dropped = 0;
  for (int i = 0; i < 100 && dropped == 0; ++i) {
    dropped = b->DropUnmatched(0, kLimit);
    if (dropped == 0) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(dropped, 1);
  EXPECT_TRUE(send->Wait(absl::Now() + kLimit).ok());
  EXPECT_EQ(b->DropUnmatched(0, kLimit), 0);
}

TEST(UcxNode, ASendToAVanishedPeerFailsInsteadOfHanging) {
  auto [a, b, ab] = Connected();
  ASSERT_TRUE(ab);
  // A payload the peer never receives, then the peer goes away.
  std::vector<char> out(8 << 20, 'q');
  auto send = ab->Send(out.data(), out.size(), 11);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(send->done());
  b.reset();
  const absl::Status s = send->Wait(absl::Now() + absl::Seconds(60));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
}

TEST(UcxNode, ClosingAnEndpointEndsItsSends) {
  auto [a, b, ab] = Connected();
  ASSERT_TRUE(ab);
  std::vector<char> out(8 << 20, 'q');
  auto send = ab->Send(out.data(), out.size(), 12);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(send->done());
  ab->Close();
  const absl::Status s = send->Wait(absl::Now() + kLimit);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(ab->failed());
  auto later = ab->Send(out.data(), out.size(), 13);
  EXPECT_EQ(later->Wait(absl::Now()).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace strata
