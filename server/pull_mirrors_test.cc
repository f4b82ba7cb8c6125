// Compressed pulls end to end in one process: the server's copies
// (PullMirrors) and the worker's (client/pulled_copies.h) through the
// answers they exchange, as ps_service and the client pass them.
#include "server/pull_mirrors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "client/pulled_copies.h"

namespace strata {
namespace {

constexpr uint64_t kMember = 7, kChunk = 3;
constexpr size_t kN = 1000;

// One pull: the request the client makes, the server's answer, the
// client's copy applied into dst.
struct Puller {
  PullMirrors& server;
  PulledCopies& client;
  v1::DType dtype;
  double ratio = 0.01;
  uint64_t generation = 0;  // the chunk's rollback generation
  bool live = true;         // whether the member is a live worker

  // The server's answer to a pull naming `base` alone, into *payload (an
  // answer lost on the way, when the client never applies it).
  absl::StatusOr<PullMirrors::Served> Serve(const std::vector<float>& w,
                                            uint64_t base,
                                            std::string* payload) {
    v1::PullRequest req;
    req.set_chunk_id(kChunk);
    req.set_dtype(dtype);
    req.set_topk_ratio(ratio);
    req.set_delta_base(base);
    return server.Serve(
        kMember, req, w.data(), w.size(), generation,
        [this](uint64_t) { return live; },
        [payload](size_t n) {
          payload->resize(n);
          return payload->data();
        });
  }

  absl::StatusOr<PullMirrors::Served> Pull(const std::vector<float>& w,
                                           std::vector<float>* dst,
                                           uint64_t base_override = ~0ull) {
    std::string payload;
    absl::StatusOr<PullMirrors::Served> s = Serve(
        w, base_override != ~0ull ? base_override : client.Base(0), &payload);
    if (!s.ok()) return s;
    v1::PullResponse resp;
    resp.set_dtype(s->dtype);
    resp.set_delta_base(s->base);
    resp.set_delta_seq(s->seq);
    dst->resize(w.size());
    absl::Status applied =
        client.Apply(0, w.size(), dtype, resp, payload, dst->data());
    if (!applied.ok()) return applied;
    return s;
  }
};

// Weights that move as an optimizer moves them: a random walk with drift.
void Step(std::vector<float>& w, std::mt19937& rng) {
  std::normal_distribution<float> d(1e-3f, 1e-2f);
  for (float& x : w) x += d(rng);
}

TEST(PullMirrors, DeltasKeepBothCopiesIdenticalAndCloseToTheWeights) {
  for (v1::DType dtype : {v1::DTYPE_ONEBIT, v1::DTYPE_TOPK}) {
    SCOPED_TRACE(dtype);
    GradientPool scratch(/*capped=*/false);
    PullMirrors server(scratch);
    PulledCopies client;
    Puller puller{server, client, dtype, 0.05};
    std::mt19937 rng(3);
    std::vector<float> w(kN, 0.5f), got;
    absl::StatusOr<PullMirrors::Served> first = puller.Pull(w, &got);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->dtype, v1::DTYPE_F32);  // no base yet: whole
    EXPECT_EQ(got, w);
    double worst = 0, bytes = 0;
    for (int t = 0; t < 100; ++t) {
      Step(w, rng);
      absl::StatusOr<PullMirrors::Served> s = puller.Pull(w, &got);
      ASSERT_TRUE(s.ok()) << s.status();
      ASSERT_EQ(s->dtype, dtype);
      bytes += s->bytes;
      // The worker holds exactly what the server thinks it holds.
      ASSERT_EQ(got, server.CopyOf(kMember, kChunk));
      for (size_t i = 0; i < kN; ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(got[i] - w[i])));
      }
    }
    // The error is carried, not piling up: after 100 steps of drift 0.1 in
    // all (1.0 of noise), the copy is within a few steps' moves.
    EXPECT_LT(worst, 0.2);
    EXPECT_GT(worst, 0.0);  // and it was compressed, not exact
    EXPECT_LT(bytes / 100, kN * 4 / 4.0);
    EXPECT_EQ(server.floats(), kN);
  }
}

TEST(PullMirrors, AnotherBaseGetsTheWholeWeights) {
  GradientPool scratch(/*capped=*/false);
  PullMirrors server(scratch);
  PulledCopies client;
  Puller puller{server, client, v1::DTYPE_ONEBIT};
  std::vector<float> w(kN, 1.0f), got;
  ASSERT_TRUE(puller.Pull(w, &got).ok());
  const uint64_t base = client.Base(0);
  ASSERT_NE(base, 0u);
  w[5] = 2;
  // An answer lost on the way: the server moved on, the worker did not.
  std::string lost;
  ASSERT_EQ(puller.Serve(w, base, &lost)->dtype, v1::DTYPE_ONEBIT);
  absl::StatusOr<PullMirrors::Served> s = puller.Pull(w, &got);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->dtype, v1::DTYPE_F32);
  EXPECT_EQ(got, w);
  // A base no server handed out: whole too.
  w[6] = 3;
  s = puller.Pull(w, &got, /*base_override=*/12345);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dtype, v1::DTYPE_F32);
  EXPECT_EQ(got, w);
}

TEST(PullMirrors, ADeltaFromAnotherCopyIsRefusedAndDropsIt) {
  GradientPool scratch(/*capped=*/false);
  PullMirrors server(scratch);
  PulledCopies client;
  Puller puller{server, client, v1::DTYPE_TOPK};
  std::vector<float> w(kN, 1.0f), got(kN);
  ASSERT_TRUE(puller.Pull(w, &got).ok());
  v1::PullResponse resp;
  resp.set_dtype(v1::DTYPE_TOPK);
  resp.set_delta_base(client.Base(0) + 1);
  resp.set_delta_seq(client.Base(0) + 2);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      client.Apply(0, kN, v1::DTYPE_TOPK, resp, "", got.data())));
  EXPECT_EQ(client.Base(0), 0u);  // the next pull asks for the whole
  // Malformed: whole weights of the wrong size; a delta that does not
  // decode; another dtype than asked.
  ASSERT_TRUE(puller.Pull(w, &got).ok());
  resp.set_dtype(v1::DTYPE_F32);
  EXPECT_TRUE(absl::IsDataLoss(
      client.Apply(0, kN, v1::DTYPE_TOPK, resp, "abc", got.data())));
  ASSERT_TRUE(puller.Pull(w, &got).ok());
  resp.set_dtype(v1::DTYPE_TOPK);
  resp.set_delta_base(client.Base(0));
  EXPECT_TRUE(absl::IsDataLoss(client.Apply(0, kN, v1::DTYPE_TOPK, resp,
                                            std::string(12, 'x'), got.data())));
  resp.set_dtype(v1::DTYPE_ONEBIT);
  EXPECT_TRUE(absl::IsDataLoss(
      client.Apply(0, kN, v1::DTYPE_TOPK, resp, "", got.data())));
}

TEST(PullMirrors, BadRatiosAreRefusedAndLeaversCopiesDropped) {
  GradientPool scratch(/*capped=*/false);
  PullMirrors server(scratch);
  PulledCopies client;
  Puller puller{server, client, v1::DTYPE_TOPK, 0.0};
  std::vector<float> w(kN, 1.0f), got;
  EXPECT_TRUE(absl::IsInvalidArgument(puller.Pull(w, &got).status()));
  puller.ratio = 1.5;
  EXPECT_TRUE(absl::IsInvalidArgument(puller.Pull(w, &got).status()));
  puller.ratio = 0.1;
  ASSERT_TRUE(puller.Pull(w, &got).ok());
  EXPECT_EQ(server.floats(), kN);
  server.Retain([](uint64_t member) { return member != kMember; });
  EXPECT_EQ(server.floats(), 0u);
  EXPECT_TRUE(server.CopyOf(kMember, kChunk).empty());
  // The worker's next pull names a base the server no longer has.
  w[0] = 9;
  absl::StatusOr<PullMirrors::Served> s = puller.Pull(w, &got);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dtype, v1::DTYPE_F32);
  EXPECT_EQ(got, w);
}

// A rollback moves the weights back: the next pull of a rolled-back chunk
// is whole, whatever base the worker names. An overflowing delta is whole
// too, so neither copy takes a value that is not finite.
TEST(PullMirrors, RollbacksAndOverflowsGetTheWholeWeights) {
  GradientPool scratch(/*capped=*/false);
  PullMirrors server(scratch);
  PulledCopies client;
  Puller puller{server, client, v1::DTYPE_ONEBIT};
  std::vector<float> w(kN, 1.0f), got;
  ASSERT_TRUE(puller.Pull(w, &got).ok());
  w[1] = 1.5f;
  ASSERT_EQ(puller.Pull(w, &got)->dtype, v1::DTYPE_ONEBIT);
  w.assign(kN, 1.0f);  // back to the snapshot
  puller.generation = 1;
  absl::StatusOr<PullMirrors::Served> s = puller.Pull(w, &got);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->dtype, v1::DTYPE_F32);
  EXPECT_EQ(got, w);
  ASSERT_EQ(puller.Pull(w, &got)->dtype, v1::DTYPE_ONEBIT);
  // Deltas near the float range: their block's sum overflows.
  for (size_t i = 0; i < 64; ++i) w[i] = 3e38f;
  std::vector<float> low(kN, 1.0f);
  for (size_t i = 0; i < 64; ++i) low[i] = -3e38f;
  ASSERT_TRUE(puller.Pull(low, &got).ok());
  s = puller.Pull(w, &got);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->dtype, v1::DTYPE_F32);
  EXPECT_EQ(got, w);
  EXPECT_EQ(server.CopyOf(kMember, kChunk), w);
}

// A member no longer live (it left while its pull waited at the gate)
// gets UNAVAILABLE and leaves no copy behind.
TEST(PullMirrors, PullsOfMembersNotLiveKeepNoCopy) {
  GradientPool scratch(/*capped=*/false);
  PullMirrors server(scratch);
  PulledCopies client;
  Puller puller{server, client, v1::DTYPE_TOPK};
  puller.live = false;
  std::vector<float> w(kN, 1.0f), got;
  EXPECT_TRUE(absl::IsUnavailable(puller.Pull(w, &got).status()));
  EXPECT_EQ(server.floats(), 0u);
  EXPECT_TRUE(server.CopyOf(kMember, kChunk).empty());
}

}  // namespace
}  // namespace strata
