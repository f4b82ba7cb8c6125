#include "server/shard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "common/chunk_plan.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

TEST(Shard, RegistrationIsIdempotentAndChecked) {
  Shard shard(Opts("bsp"));
  auto first = shard.Register(OneChunk());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->created(), 1u);
  auto again = shard.Register(OneChunk());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->existing(), 1u);

  auto other_shape = OneChunk();
  other_shape.mutable_chunks(0)->set_tensor_shape(0, kN * 2);
  EXPECT_EQ(shard.Register(other_shape).status().code(),
            absl::StatusCode::kFailedPrecondition);

  auto other_group = OneChunk();
  other_group.mutable_groups(0)->mutable_optimizer()->set_lr(0.5f);
  EXPECT_EQ(shard.Register(other_group).status().code(),
            absl::StatusCode::kFailedPrecondition);

  auto unknown_group = OneChunk("v");
  unknown_group.clear_groups();
  unknown_group.mutable_chunks(0)->set_group("nope");
  EXPECT_EQ(shard.Register(unknown_group).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto bad_id = OneChunk("u");
  bad_id.mutable_chunks(0)->set_chunk_id(12345);
  EXPECT_EQ(shard.Register(bad_id).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.num_chunks(), 1u);
}

TEST(Shard, BadPushesAreRejectedAndLeaveWeightsUntouched) {
  Shard shard(Opts("asp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(3, {7}, 2));
  const std::vector<float> before = PullNow(shard, 7, -1);
  std::vector<float> g(kN, 1.0f);

  auto unknown = PushReq(7, 0, 1, 3);
  unknown.set_chunk_id(99);
  EXPECT_EQ(shard.Push(unknown, Bytes(g)).status().code(),
            absl::StatusCode::kInvalidArgument);

  std::vector<float> short_grad(kN - 1, 1.0f);
  EXPECT_EQ(shard.Push(PushReq(7, 0, 1, 3), Bytes(short_grad)).status().code(),
            absl::StatusCode::kInvalidArgument);

  std::vector<float> nan = g;
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  auto status = shard.Push(PushReq(7, 0, 1, 3), Bytes(nan)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("NaN"), absl::string_view::npos);
  std::vector<float> inf = g;
  inf[0] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(shard.Push(PushReq(7, 0, 1, 3), Bytes(inf)).ok());
  // Finite, but its square overflows Adam's fp32 second moment.
  std::vector<float> huge = g;
  huge[5] = -3e38f;
  auto huge_status = shard.Push(PushReq(7, 0, 1, 3), Bytes(huge)).status();
  EXPECT_EQ(huge_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge_status.message().find("beyond +-1e19"),
            absl::string_view::npos);
  EXPECT_EQ(shard.counters().rejected_nonfinite.load(), 3u);

  EXPECT_EQ(shard.Push(PushReq(8, 0, 1, 3), Bytes(g)).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not a member
  EXPECT_EQ(shard.Push(PushReq(7, 0, 1, 1), Bytes(g)).status().code(),
            absl::StatusCode::kAborted);  // stamped before the member joined
  EXPECT_EQ(shard.Push(PushReq(7, 0, 0, 3), Bytes(g)).status().code(),
            absl::StatusCode::kInvalidArgument);  // zero samples
  // A payload that can no longer be read (its shared-memory session was
  // detached): the reader's error.
  auto gone =
      shard.Push(PushReq(7, 0, 1, 3), kN * 4, [](char*, size_t, size_t) {
        return absl::NotFoundError("session detached");
      });
  EXPECT_TRUE(absl::IsNotFound(gone.status())) << gone.status();

  EXPECT_EQ(PullNow(shard, 7, -1), before);
  EXPECT_EQ(shard.counters().pushes_applied.load(), 0u);
}

TEST(Shard, BspClosesAStepOnceEveryWorkerPushedWithSampleWeights) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  auto a = shard.Push(PushReq(1, 0, 3), Bytes(std::vector<float>(kN, 1.0f)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->applied());
  EXPECT_EQ(a->version(), 0u);
  // A retried push for the open step does not count twice.
  ASSERT_TRUE(
      shard.Push(PushReq(1, 0, 3), Bytes(std::vector<float>(kN, 1.0f))).ok());
  auto b = shard.Push(PushReq(2, 0, 1), Bytes(std::vector<float>(kN, 5.0f)));
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->applied());
  EXPECT_EQ(b->version(), 1u);
  uint64_t version = 0;
  std::vector<float> w = PullNow(shard, 1, 1, &version);
  EXPECT_EQ(version, 1u);
  // Weighted mean: (3*1 + 1*5) / 4 = 2; SGD lr 1 from zeros.
  for (float x : w) EXPECT_FLOAT_EQ(x, -2.0f);
  // Late and early pushes.
  EXPECT_TRUE(shard.Push(PushReq(1, 0, 3), Bytes(std::vector<float>(kN, 1.0f)))
                  .ok());  // retry of a closed step
  EXPECT_EQ(shard.Push(PushReq(1, 5, 3), Bytes(std::vector<float>(kN, 1.0f)))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(Shard, BspPullWaitsForTheStepAndRejectsImpossibleVersions) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  v1::PullRequest impossible;
  impossible.set_member_id(1);
  impossible.set_chunk_id(ChunkId("w", 0));
  impossible.set_clock(0);
  impossible.set_min_version(2);
  std::string out;
  EXPECT_EQ(shard.Pull(impossible, &out).status().code(),
            absl::StatusCode::kOutOfRange);

  ASSERT_TRUE(
      shard.Push(PushReq(1, 0, 1), Bytes(std::vector<float>(kN, 1.0f))).ok());
  std::thread late([&] {
    WaitForPullsAtTheGate(shard, 1);
    ASSERT_TRUE(
        shard.Push(PushReq(2, 0, 1), Bytes(std::vector<float>(kN, 1.0f))).ok());
  });
  uint64_t version = 0;
  std::vector<float> w =
      PullNow(shard, 1, 1, &version);  // blocks until worker 2 pushed
  late.join();
  EXPECT_EQ(version, 1u);
  EXPECT_FLOAT_EQ(w[0], -1.0f);
}

// A view whose live workers changed at `workers_epoch`.
v1::View ViewAt(uint64_t epoch, std::vector<uint64_t> workers,
                uint64_t workers_epoch) {
  v1::View v = MakeView(epoch, std::move(workers), 1);
  v.set_workers_epoch(workers_epoch);
  return v;
}

v1::PushRequest Share(uint64_t member, int64_t step, uint64_t first,
                      uint64_t count, uint64_t epoch) {
  v1::PushRequest r = PushReq(member, step, count, epoch);
  r.set_first_sample(first);
  return r;
}

absl::StatusCode PullCode(Shard& shard, uint64_t member, int64_t clock,
                          uint64_t epoch) {
  v1::PullRequest r;
  r.set_member_id(member);
  r.set_chunk_id(ChunkId("w", 0));
  r.set_clock(clock);
  r.set_epoch(epoch);
  std::string out;
  return shard.Pull(r, &out).status().code();
}

TEST(Shard, BspRedoesTheOpenStepWhenTheWorkersChange) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  const auto grad = [](float x) { return Bytes(std::vector<float>(kN, x)); };
  // Step 0 over samples [0, 6): two each for workers 1, 2, 3.
  shard.UpdateView(ViewAt(1, {1, 2, 3}, 1));
  ASSERT_TRUE(shard.Push(Share(1, 0, 0, 2, 1), grad(1)).ok());
  ASSERT_TRUE(shard.Push(Share(3, 0, 4, 2, 1), grad(9)).ok());
  // Worker 3 dies: the step's pushes are dropped, and the step is redone
  // with three samples each for workers 1 and 2.
  shard.UpdateView(ViewAt(2, {1, 2}, 2));
  EXPECT_EQ(shard.Push(Share(2, 0, 2, 2, 1), grad(3)).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(PullCode(shard, 1, 1, 1), absl::StatusCode::kAborted);
  ASSERT_TRUE(shard.Push(Share(1, 0, 0, 3, 2), grad(1)).ok());
  auto closed = shard.Push(Share(2, 0, 3, 3, 2), grad(3));
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_TRUE(closed->applied());
  EXPECT_FLOAT_EQ(PullNow(shard, 1, 1)[0], -2.0f);  // mean of 1 and 3
  // A redo of a step that already closed here changes nothing.
  auto again = shard.Push(Share(1, 0, 0, 3, 2), grad(100));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->applied());

  // Worker 4 joins while step 1 is open: the step is redone by three.
  ASSERT_TRUE(shard.Push(Share(1, 1, 6, 3, 2), grad(1)).ok());
  shard.UpdateView(ViewAt(3, {1, 2, 4}, 3));
  EXPECT_EQ(PullCode(shard, 1, 2, 2), absl::StatusCode::kAborted);
  ASSERT_TRUE(shard.Push(Share(1, 1, 6, 2, 3), grad(3)).ok());
  ASSERT_TRUE(shard.Push(Share(2, 1, 8, 2, 3), grad(3)).ok());
  ASSERT_TRUE(shard.Push(Share(4, 1, 10, 2, 3), grad(3)).ok());
  uint64_t version = 0;
  EXPECT_FLOAT_EQ(PullNow(shard, 4, 2, &version)[0], -5.0f);
  EXPECT_EQ(version, 2u);
  v1::StatsResponse stats;
  shard.FillStats(&stats);
  EXPECT_EQ(stats.bsp_samples_applied(), 12u);  // steps 0 and 1, 6 each
  EXPECT_EQ(stats.bsp_tiling_errors(), 0u);
  EXPECT_EQ(stats.aborted_stale_epoch(), 3u);
}

// A redo push that waited for the server's view to catch up is counted,
// whether it lands before or after the view change's sweep of its chunk.
TEST(Shard, BspRedoPushWaitingForTheViewCounts) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(ViewAt(1, {1, 2}, 1));
  const std::string g = Bytes(std::vector<float>(kN, 1.0f));
  absl::StatusOr<v1::PushResponse> early;
  std::thread pusher([&] { early = shard.Push(Share(1, 0, 0, 2, 2), g); });
  // Once it waits for epoch 2:
  const absl::Time deadline = absl::Now() + absl::Seconds(4);
  while (shard.counters().view_waits.load() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(shard.counters().view_waits.load(), 1u);
  shard.UpdateView(ViewAt(2, {1, 3}, 2));
  pusher.join();
  ASSERT_TRUE(early.ok()) << early.status();
  auto closing = shard.Push(Share(3, 0, 2, 2, 2), g);
  ASSERT_TRUE(closing.ok()) << closing.status();
  EXPECT_TRUE(closing->applied());
  // And a push cut for the old workers is refused, not counted.
  EXPECT_EQ(shard.Push(Share(1, 1, 4, 2, 1), g).status().code(),
            absl::StatusCode::kAborted);
}

TEST(Shard, BspCountsPushesThatDoNotTileTheStep) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(ViewAt(1, {1, 2}, 1));
  const std::string g = Bytes(std::vector<float>(kN, 1.0f));
  ASSERT_TRUE(shard.Push(Share(1, 0, 0, 2, 1), g).ok());
  ASSERT_TRUE(shard.Push(Share(2, 0, 1, 2, 1), g).ok());  // overlaps
  v1::StatsResponse stats;
  shard.FillStats(&stats);
  EXPECT_EQ(stats.bsp_tiling_errors(), 1u);
}

TEST(Shard, RefusesPushesFromAViewItHasNotSeenOrFromAFencedMember) {
  Shard shard(Opts("bsp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(ViewAt(4, {1, 2}, 4));
  const std::string g = Bytes(std::vector<float>(kN, 1.0f));
  auto future = shard.Push(PushReq(1, 0, 1, UINT64_MAX), g);
  EXPECT_EQ(future.status().code(), absl::StatusCode::kUnavailable)
      << future.status();
  // Member 3 was never (or is no longer) live: it must register again.
  auto fenced = shard.Push(PushReq(3, 0, 1, 4), g);
  EXPECT_EQ(fenced.status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<float> w = PullNow(shard, 1, 0);
  for (float x : w) EXPECT_EQ(x, 0.0f);  // nothing was applied
}

// Worker 1's pull of chunk w/0 at `clock`.
v1::PullRequest PullAtClock(int64_t clock) {
  v1::PullRequest r;
  r.set_member_id(1);
  r.set_chunk_id(ChunkId("w", 0));
  r.set_clock(clock);
  return r;
}

// Registers one chunk on `shard` with workers 1 and 2 live; worker 1
// pushes steps 0 and 1 (clock 2), worker 2 nothing (clock 0).
void StartWithWorker1Ahead(Shard& shard) {
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  std::vector<float> g(kN, 1.0f);
  ASSERT_TRUE(shard.Push(PushReq(1, 0, 1), Bytes(g)).ok());
  ASSERT_TRUE(shard.Push(PushReq(1, 1, 1), Bytes(g)).ok());
}

TEST(Shard, SspReaderWaitsForTheSlowestWorkerWithinTheBound) {
  Shard shard(Opts("ssp:1", absl::Milliseconds(300)));
  StartWithWorker1Ahead(shard);
  std::vector<float> g(kN, 1.0f);
  v1::PullRequest r = PullAtClock(2);
  std::string out;
  // 0 < 2 - 1: worker 1 must wait; nobody advances, so it times out.
  EXPECT_EQ(shard.Pull(r, &out).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(
      shard.Push(PushReq(2, 0, 1), Bytes(g)).ok());  // worker 2 reaches clock 1
  auto res = shard.Pull(r, &out);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->min_clock, 1);
  EXPECT_EQ(res->version, 3u);
}

// The end of an SSP job: worker 2 found every sample handed out (drained
// in the view), so worker 1's pull ahead of it waits no longer; a pull
// already waiting goes on at the view change. Drained no more, it is
// waited for again.
TEST(Shard, SspReaderDoesNotWaitForADrainedWorker) {
  Shard shard(Opts("ssp:0", absl::Seconds(30)));
  StartWithWorker1Ahead(shard);
  std::vector<float> g(kN, 1.0f);
  v1::PullRequest r = PullAtClock(2);
  absl::StatusOr<PullResult> waited;
  std::string out;
  std::thread reader([&] { waited = shard.Pull(r, &out); });
  v1::View drained = MakeView(2, {1, 2}, 1);
  drained.mutable_workers(1)->set_drained(true);
  absl::SleepFor(absl::Milliseconds(50));  // the pull waits (or will)
  shard.UpdateView(drained);
  reader.join();  // would time out after 30 s without the change
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->version, 2u);
  EXPECT_EQ(waited->min_clock, 0);  // worker 2's clock, still shown

  // A sample comes back to worker 2: SSP waits for it again.
  Shard again(Opts("ssp:0", absl::Milliseconds(200)));
  ASSERT_TRUE(again.Register(OneChunk()).ok());
  again.UpdateView(drained);
  ASSERT_TRUE(again.Push(PushReq(1, 0, 1), Bytes(g)).ok());
  r.set_clock(1);
  EXPECT_TRUE(again.Pull(r, &out).ok());
  again.UpdateView(MakeView(3, {1, 2}, 1));
  EXPECT_EQ(again.Pull(r, &out).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(Shard, AspNeverBlocks) {
  Shard shard(Opts("asp", absl::Milliseconds(100)));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  for (int s = 0; s < 5; ++s) {
    ASSERT_TRUE(
        shard.Push(PushReq(1, s, 1), Bytes(std::vector<float>(kN, 1.0f))).ok());
  }
  uint64_t version = 0;
  EXPECT_FLOAT_EQ(PullNow(shard, 1, 5, &version)[0], -5.0f);
  EXPECT_EQ(version, 5u);
}

TEST(Shard, BspAutoSnapshotCapturesEveryChunkAtTheSameStep) {
  ShardOptions o = Opts("bsp");
  o.snapshot_every = 2;
  Shard shard(o);
  auto req = OneChunk("w");
  auto* c2 = req.add_chunks();
  *c2 = req.chunks(0);
  c2->set_tensor("v");
  c2->set_chunk_id(ChunkId("v", 0));
  ASSERT_TRUE(shard.Register(req).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  std::vector<std::pair<int64_t, size_t>> got;
  shard.set_snapshot_sink(
      [&](uint64_t, int64_t step, std::unique_ptr<ChunkTier> t) {
        got.emplace_back(step, t->size());
      });
  for (int s = 0; s < 4; ++s) {
    for (const char* name : {"w", "v"}) {
      auto p = PushReq(1, s, 1);
      p.set_chunk_id(ChunkId(name, 0));
      ASSERT_TRUE(shard.Push(p, Bytes(std::vector<float>(kN, 1.0f))).ok());
    }
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], std::make_pair(int64_t{2}, size_t{2}));
  EXPECT_EQ(got[1], std::make_pair(int64_t{4}, size_t{2}));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

TEST(Shard, AsyncPushRetriedAfterALostReplyAppliesOnce) {
  Shard shard(Opts("asp"));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1}, 1));
  std::vector<float> g(kN, 1.0f);
  auto first = shard.Push(PushReq(1, 0, 1), Bytes(g));
  auto retry = shard.Push(PushReq(1, 0, 1), Bytes(g));
  ASSERT_TRUE(first.ok() && retry.ok());
  EXPECT_TRUE(first->applied());
  EXPECT_FALSE(retry->applied());
  EXPECT_FLOAT_EQ(PullNow(shard, 1, -1)[0], -1.0f);
  ASSERT_TRUE(
      shard.Push(PushReq(1, 1, 1), Bytes(g)).ok());  // the next step applies
  EXPECT_FLOAT_EQ(PullNow(shard, 1, -1)[0], -2.0f);
}

// An SSP/ASP push's async_lr_scale multiplies its learning rate (SGD at
// lr 1 here: the step is the scale); BSP ignores it; one outside [0, 1]
// is refused and changes nothing.
TEST(Shard, AsyncLrScaleScalesAnAsyncPushAndBspIgnoresIt) {
  for (const char* mode : {"asp", "ssp:1", "bsp"}) {
    SCOPED_TRACE(mode);
    Shard shard(Opts(mode));
    ASSERT_TRUE(shard.Register(OneChunk()).ok());
    shard.UpdateView(MakeView(1, {1}, 1));
    std::vector<float> g(kN, 1.0f);
    for (float bad : {-0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
      v1::PushRequest req = PushReq(1, 0, 1);
      req.set_async_lr_scale(bad);
      EXPECT_EQ(shard.Push(req, Bytes(g)).status().code(),
                absl::StatusCode::kInvalidArgument);
    }
    EXPECT_FLOAT_EQ(PullNow(shard, 1, -1)[0], 0.0f);
    v1::PushRequest req = PushReq(1, 0, 1);
    req.set_async_lr_scale(0.25f);
    ASSERT_TRUE(shard.Push(req, Bytes(g)).ok());
    const bool bsp = std::string(mode) == "bsp";
    EXPECT_FLOAT_EQ(PullNow(shard, 1, -1)[0], bsp ? -1.0f : -0.25f);
    ASSERT_TRUE(shard.Push(PushReq(1, 1, 1), Bytes(g)).ok());  // unset: 1
    EXPECT_FLOAT_EQ(PullNow(shard, 1, -1)[0], bsp ? -2.0f : -1.25f);
  }
}

// Two chunks ("w" and "v"): an update is reported once both applied it.
TEST(Shard, ReportsAnUpdateToTheLedgerOnceEveryChunkAppliedIt) {
  for (const char* mode : {"bsp", "asp"}) {
    SCOPED_TRACE(mode);
    Shard shard(Opts(mode));
    ASSERT_TRUE(shard.Register(OneChunk("w")).ok());
    ASSERT_TRUE(shard.Register(OneChunk("v")).ok());
    shard.UpdateView(MakeView(3, {1, 2}, 3));
    std::vector<v1::AppliedReport> reports;
    shard.set_applied_sink(
        [&](const v1::AppliedReport& r) { reports.push_back(r); });
    std::vector<float> g(kN, 1.0f);
    auto push = [&](uint64_t member, const char* tensor) {
      v1::PushRequest r = PushReq(member, 0, 1, 3);
      r.set_chunk_id(ChunkId(tensor, 0));
      r.set_first_sample(member - 1);
      ASSERT_TRUE(shard.Push(r, Bytes(g)).ok());
    };
    push(1, "w");
    push(2, "w");
    push(1, "v");
    const bool bsp = std::string(mode) == "bsp";
    // ASP: worker 1's push is applied on both chunks; BSP: the step is open
    // on "v" until worker 2 pushes.
    ASSERT_EQ(reports.size(), bsp ? 0u : 1u);
    push(2, "v");
    ASSERT_EQ(reports.size(), bsp ? 1u : 2u);
    EXPECT_EQ(reports[0].step(), 0);
    EXPECT_EQ(reports[0].worker_member_id(), bsp ? 0u : 1u);
    EXPECT_EQ(reports[0].epoch(), 3u);
    if (!bsp) {
      EXPECT_EQ(reports[1].worker_member_id(), 2u);
    }
  }
}

TEST(Shard, RefusesChunkSpecsThatWouldExhaustMemoryOrOverflow) {
  ShardOptions o = Opts("bsp");
  o.max_chunk_bytes = 1 << 20;
  Shard shard(o);
  auto huge = OneChunk("h");
  huge.mutable_chunks(0)->set_numel(1 << 20);  // 4 MiB > 1 MiB
  huge.mutable_chunks(0)->set_tensor_shape(0, 1 << 20);
  EXPECT_EQ(shard.Register(huge).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto wraps = OneChunk("o");
  wraps.mutable_chunks(0)->clear_tensor_shape();
  for (int i = 0; i < 3; ++i)
    wraps.mutable_chunks(0)->add_tensor_shape(int64_t{1} << 30);
  EXPECT_EQ(shard.Register(wraps).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto past_end = OneChunk("p");
  past_end.mutable_chunks(0)->set_offset(UINT64_MAX - 2);
  EXPECT_EQ(shard.Register(past_end).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.num_chunks(), 0u);
}

TEST(Shard, RefusesARequestThatContradictsItself) {
  Shard shard(Opts("bsp"));
  auto twice = OneChunk();
  *twice.add_chunks() = twice.chunks(0);
  twice.mutable_chunks(1)->set_numel(kN - 1);
  EXPECT_EQ(shard.Register(twice).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto groups = OneChunk();
  *groups.add_groups() = groups.groups(0);
  groups.mutable_groups(1)->mutable_optimizer()->set_lr(0.5f);
  EXPECT_EQ(shard.Register(groups).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.num_chunks(), 0u);
}

TEST(Shard, RefusesAtOnceAPullThatCanNeverBeServed) {
  Shard shard(Opts("bsp", absl::Seconds(60)));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  v1::PullRequest r;
  r.set_member_id(99);  // not a worker: no clock bound applies
  r.set_chunk_id(ChunkId("w", 0));
  r.set_min_version(std::numeric_limits<uint64_t>::max());
  std::string out;
  const absl::Time start = absl::Now();
  absl::Status far = shard.Pull(r, &out).status();
  EXPECT_EQ(far.code(), absl::StatusCode::kOutOfRange) << far;
  EXPECT_NE(far.message().find("can never be served"), std::string::npos);
  r.set_member_id(1);
  r.set_min_version(0);
  r.set_clock(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(shard.Pull(r, &out).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // neither waited
  r.set_clock(-7);
  EXPECT_EQ(shard.Pull(r, &out).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Shard, APullBeyondItsRequestersQuotaOfWaitsIsRefused) {
  ShardOptions o = Opts("bsp", absl::Seconds(60));
  o.max_waiting_pulls_others = 2;
  Shard shard(o);
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  auto stranger_pull = [&shard] {
    v1::PullRequest r;
    r.set_member_id(99);
    r.set_chunk_id(ChunkId("w", 0));
    r.set_min_version(1);  // waits: no step has closed
    std::string out;
    return shard.Pull(r, &out).status();
  };
  absl::Status waited[2];
  std::thread a([&] { waited[0] = stranger_pull(); });
  std::thread b([&] { waited[1] = stranger_pull(); });
  WaitForPullsAtTheGate(shard, 2);
  absl::Status third = stranger_pull();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_EQ(shard.counters().rejected_busy.load(), 1u);
  // A worker's own pulls still get in, and are served.
  ASSERT_TRUE(
      shard.Push(PushReq(1, 0, 1), Bytes(std::vector<float>(kN, 1.0f))).ok());
  ASSERT_TRUE(
      shard.Push(PushReq(2, 0, 1), Bytes(std::vector<float>(kN, 1.0f))).ok());
  uint64_t version = 0;
  PullNow(shard, 1, 1, &version);
  EXPECT_EQ(version, 1u);
  a.join();
  b.join();
  EXPECT_TRUE(waited[0].ok()) << waited[0];  // served once the step closed
  EXPECT_TRUE(waited[1].ok()) << waited[1];
  EXPECT_TRUE(stranger_pull().ok());  // the quota is free again
}

TEST(Shard, CancelReleasesPullsWaitingAtTheGate) {
  Shard shard(Opts("bsp", absl::Seconds(60)));
  ASSERT_TRUE(shard.Register(OneChunk()).ok());
  shard.UpdateView(MakeView(1, {1, 2}, 1));
  ASSERT_TRUE(
      shard.Push(PushReq(1, 0, 1), Bytes(std::vector<float>(kN, 1.0f))).ok());
  absl::Status pulled;
  std::thread waiter([&] {
    v1::PullRequest r;
    r.set_member_id(1);
    r.set_chunk_id(ChunkId("w", 0));
    r.set_clock(1);  // waits for worker 2, who never pushes
    std::string out;
    pulled = shard.Pull(r, &out).status();
  });
  WaitForPullsAtTheGate(shard, 1);
  shard.Cancel();
  waiter.join();  // would take the full 60 s without Cancel
  EXPECT_EQ(pulled.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace strata
