// Deferred pushes and Commit (Shard::Commit): gradients held until the
// worker's clipping factor arrives, then applied as plain pushes would be.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/shard.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

v1::PushRequest Deferred(uint64_t member, int64_t step, uint64_t samples) {
  v1::PushRequest r = PushReq(member, step, samples);
  r.set_deferred(true);
  return r;
}

v1::CommitRequest CommitReq(uint64_t member, int64_t step, float scale,
                            uint32_t pushes) {
  v1::CommitRequest r;
  r.set_member_id(member);
  r.set_step(step);
  r.set_scale(scale);
  r.set_pushes(pushes);
  return r;
}

std::vector<float> Grad(float base) {
  std::vector<float> g(kN);
  for (int i = 0; i < kN; ++i) g[i] = base + 0.37f * i;
  return g;
}

// An attempt the worker gave up on, whose handler read the payload late
// (after the worker reused the bytes: here, other values), cannot replace
// its retry; a later push (a redo) with the same stamp does.
TEST(ShardDeferred, ALateAttemptDoesNotReplaceItsRetryButALaterPushDoes) {
  const float scale = 0.5f;
  auto numbered = [](uint64_t seq, uint32_t attempt) {
    v1::PushRequest r = Deferred(1, 0, 4);
    r.set_push_seq(seq);
    r.set_attempt(attempt);
    return r;
  };
  auto committed = [&](std::vector<std::pair<v1::PushRequest, float>> pushes) {
    Shard shard(Opts("bsp"));
    EXPECT_TRUE(shard.Register(OneChunk()).ok());
    shard.UpdateView(MakeView(1, {1}, 1));
    for (const auto& [req, base] : pushes) {
      EXPECT_TRUE(shard.Push(req, Bytes(Grad(base))).ok());
    }
    EXPECT_TRUE(shard.Commit(CommitReq(1, 0, scale, 1)).ok());
    return PullNow(shard, 1, 1);
  };
  const std::vector<float> good = committed({{numbered(5, 2), 1.5f}});
  const std::vector<float> other = committed({{numbered(5, 2), 9.0f}});
  ASSERT_NE(good, other);
  // Attempt 1 of push 5, read late, after its retry (attempt 2) was held.
  EXPECT_EQ(committed({{numbered(5, 2), 1.5f}, {numbered(5, 1), 9.0f}}), good);
  // An older push's late attempt, too.
  EXPECT_EQ(committed({{numbered(5, 2), 1.5f}, {numbered(4, 3), 9.0f}}), good);
  // A later push of the same step and stamp (a redo) replaces it.
  EXPECT_EQ(committed({{numbered(5, 2), 1.5f}, {numbered(6, 1), 9.0f}}), other);
}

TEST(ShardDeferred, CommitAppliesTheScaledGradientAsAPlainPushWould) {
  for (const char* mode : {"bsp", "asp"}) {
    SCOPED_TRACE(mode);
    const float scale = 0.3f;
    // The reference: the worker scales, then pushes.
    Shard plain(Opts(mode));
    ASSERT_TRUE(plain.Register(OneChunk()).ok());
    plain.UpdateView(MakeView(1, {1}, 1));
    std::vector<float> scaled = Grad(1.5f);
    for (float& g : scaled) g *= scale;
    ASSERT_TRUE(plain.Push(PushReq(1, 0, 4), Bytes(scaled)).ok());

    Shard shard(Opts(mode));
    ASSERT_TRUE(shard.Register(OneChunk()).ok());
    shard.UpdateView(MakeView(1, {1}, 1));
    const std::vector<float> before = PullNow(shard, 1, -1);
    auto held = shard.Push(Deferred(1, 0, 4), Bytes(Grad(1.5f)));
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_FALSE(held->applied());
    EXPECT_EQ(PullNow(shard, 1, -1), before);  // held, not applied
    // A retry of the same push replaces it: still one push to commit.
    ASSERT_TRUE(shard.Push(Deferred(1, 0, 4), Bytes(Grad(1.5f))).ok());
    auto commit = shard.Commit(CommitReq(1, 0, scale, 1));
    ASSERT_TRUE(commit.ok()) << commit.status();
    EXPECT_EQ(commit->applied(), 1u);
    EXPECT_EQ(PullNow(shard, 1, -1), PullNow(plain, 1, -1));  // bit-identical
    EXPECT_NE(PullNow(shard, 1, -1), before);
  }
}

// A held SSP/ASP push keeps its learning-rate factor (PushRequest.
// async_lr_scale) to its Commit, which scales the gradient too: SGD at lr
// 1, so the step is both factors times the gradient.
TEST(ShardDeferred, CommitKeepsAnAsyncPushsLearningRateFactor) {
  for (const char* mode : {"asp", "ssp:1"}) {
    SCOPED_TRACE(mode);
    Shard shard(Opts(mode));
    ASSERT_TRUE(shard.Register(OneChunk()).ok());
    shard.UpdateView(MakeView(1, {1}, 1));
    v1::PushRequest held = Deferred(1, 0, 1);
    held.set_async_lr_scale(0.25f);
    ASSERT_TRUE(shard.Push(held, Bytes(std::vector<float>(kN, 1.0f))).ok());
    auto commit = shard.Commit(CommitReq(1, 0, 0.5f, 1));
    ASSERT_TRUE(commit.ok()) << commit.status();
    EXPECT_EQ(commit->applied(), 1u);
    EXPECT_FLOAT_EQ(PullNow(shard, 1, -1)[0], -0.125f);
  }
}

TEST(ShardDeferred, BspStepClosesOnTheLastCommit) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  ASSERT_TRUE(shard.Push(Deferred(1, 0, 1), Bytes(Grad(1.0f))).ok());
  v1::PushRequest second_half = Deferred(2, 0, 1);
  second_half.set_first_sample(1);  // the step's samples tile [0, 2)
  ASSERT_TRUE(shard.Push(second_half, Bytes(Grad(3.0f))).ok());
  auto first = shard.Commit(CommitReq(1, 0, 0.5f, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->applied(), 0u);  // worker 2 has not committed yet
  uint64_t version = 0;
  PullNow(shard, 1, -1, &version);
  EXPECT_EQ(version, 0u);
  auto second = shard.Commit(CommitReq(2, 0, 1.0f, 1));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->applied(), 1u);
  const std::vector<float> w = PullNow(shard, 1, -1, &version);
  EXPECT_EQ(version, 1u);
  // SGD lr 1 from zeros: minus the sample-weighted mean of 0.5*g1 and g2.
  const std::vector<float> g1 = Grad(1.0f), g2 = Grad(3.0f);
  for (int i = 0; i < kN; ++i)
    EXPECT_FLOAT_EQ(w[i], -(0.5f * g1[i] + g2[i]) / 2) << i;
}

TEST(ShardDeferred, BadCommitsChangeNothing) {
  Shard shard(Opts("asp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  const std::vector<float> before = PullNow(shard, 1, -1);
  for (float scale : {0.0f, -1.0f, 1.5f, std::nanf(""), INFINITY}) {
    EXPECT_TRUE(absl::IsInvalidArgument(
        shard.Commit(CommitReq(1, 0, scale, 0)).status()))
        << scale;
  }
  // A NaN gradient is refused when pushed, not held.
  std::vector<float> nan = Grad(1.0f);
  nan[2] = std::nanf("");
  EXPECT_TRUE(absl::IsInvalidArgument(
      shard.Push(Deferred(1, 0, 1), Bytes(nan)).status()));
  // The server holds one push where the worker sent two: nothing applied.
  ASSERT_TRUE(shard.Push(Deferred(1, 0, 1), Bytes(Grad(1.0f))).ok());
  EXPECT_TRUE(absl::IsAborted(shard.Commit(CommitReq(1, 0, 1.0f, 2)).status()));
  // The held push went with the failed commit; a commit of another step
  // finds nothing either.
  EXPECT_TRUE(absl::IsAborted(shard.Commit(CommitReq(1, 0, 1.0f, 1)).status()));
  ASSERT_TRUE(shard.Push(Deferred(1, 1, 1), Bytes(Grad(1.0f))).ok());
  EXPECT_TRUE(absl::IsAborted(shard.Commit(CommitReq(1, 2, 1.0f, 1)).status()));
  // A member that left the view loses what it held.
  ASSERT_TRUE(shard.Push(Deferred(2, 0, 1), Bytes(Grad(1.0f))).ok());
  shard.UpdateView(MakeView(2, {1}, 1));
  EXPECT_TRUE(absl::IsAborted(shard.Commit(CommitReq(2, 0, 1.0f, 1)).status()));
  EXPECT_EQ(PullNow(shard, 1, -1), before);
}

// A worker pulls the next step while its commit applies (the pulls wait
// at the gate). If the commit fails here, the step cannot close until the
// worker redoes it: the waiting pulls are answered ABORTED at once, not
// after max_wait; a redo's pushes clear that, and its commit serves them.
TEST(ShardDeferred, AFailedCommitAbortsTheMembersWaitingPulls) {
  Shard shard(Opts("bsp", absl::Seconds(30)));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  auto pull_step1 = [&shard] {
    v1::PullRequest r;
    r.set_member_id(1);
    r.set_chunk_id(ChunkId("w", 0));
    r.set_clock(1);
    r.set_epoch(1);
    std::string out;
    return shard.Pull(r, &out);
  };
  ASSERT_TRUE(shard.Push(Deferred(1, 0, 1), Bytes(Grad(1.0f))).ok());
  absl::StatusOr<PullResult> waited;
  std::thread puller([&] { waited = pull_step1(); });
  WaitForPullsAtTheGate(shard, 1);
  // The server holds one push where the worker counted two.
  EXPECT_TRUE(absl::IsAborted(shard.Commit(CommitReq(1, 0, 1.0f, 2)).status()));
  puller.join();
  // ABORTED, not DEADLINE_EXCEEDED after max_wait.
  EXPECT_TRUE(absl::IsAborted(waited.status())) << waited.status();
  EXPECT_NE(waited.status().message().find("commit of step 0"),
            std::string::npos)
      << waited.status();
  // A later pull for the step is refused too, until the redo.
  EXPECT_TRUE(absl::IsAborted(pull_step1().status()));
  // The redo: its pushes clear the failure, and its commit, applied while
  // the next pull waits, serves that pull.
  ASSERT_TRUE(shard.Push(Deferred(1, 0, 1), Bytes(Grad(1.0f))).ok());
  std::thread redo_puller([&] { waited = pull_step1(); });
  WaitForPullsAtTheGate(shard, 1);
  auto commit = shard.Commit(CommitReq(1, 0, 1.0f, 1));
  ASSERT_TRUE(commit.ok()) << commit.status();
  redo_puller.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->version, 1u);
}

// A commit whose answer was lost is sent again: it gets the same answer,
// and the update is applied once.
TEST(ShardDeferred, ARepeatedCommitGetsTheSameAnswer) {
  Shard shard(Opts("asp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  ASSERT_TRUE(shard.Push(Deferred(1, 0, 1), Bytes(Grad(1.0f))).ok());
  auto first = shard.Commit(CommitReq(1, 0, 0.5f, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<float> after = PullNow(shard, 1, -1);
  auto again = shard.Commit(CommitReq(1, 0, 0.5f, 1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->applied(), first->applied());
  EXPECT_EQ(PullNow(shard, 1, -1), after);  // applied once
  // Another step with nothing held is no repeat.
  EXPECT_TRUE(absl::IsAborted(shard.Commit(CommitReq(1, 1, 0.5f, 1)).status()));
}

// A late handler of an abandoned attempt (an older step or generation)
// does not replace what a newer attempt holds.
TEST(ShardDeferred, AnOlderPushDoesNotReplaceANewerOne) {
  Shard shard(Opts("asp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  ASSERT_TRUE(shard.Push(Deferred(1, 3, 1), Bytes(Grad(1.0f))).ok());
  ASSERT_TRUE(shard.Push(Deferred(1, 2, 1), Bytes(Grad(9.0f))).ok());
  Shard reference(Opts("asp"));
  ASSERT_TRUE(reference.Register(OneChunk()).ok());
  reference.UpdateView(MakeView(1, {1}, 1));
  ASSERT_TRUE(reference.Push(PushReq(1, 3, 1), Bytes(Grad(1.0f))).ok());
  auto commit = shard.Commit(CommitReq(1, 3, 1.0f, 1));
  ASSERT_TRUE(commit.ok()) << commit.status();
  EXPECT_EQ(PullNow(shard, 1, -1), PullNow(reference, 1, -1));
}

}  // namespace
}  // namespace strata
