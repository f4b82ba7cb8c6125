// A joining replica's state (Shard::ExportState, Shard::InstallState): a
// shard that installs another's state mid-step applies every later change
// as the other does, and ends bit-identical, under BSP (open steps,
// deferred pushes, partly applied updates) and SSP (clocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "server/shard.h"
#include "storage/chunk_tier.h"
#include "testing/server/shard_util.h"

namespace strata {
namespace {

using namespace shard_test;  // NOLINT: the helpers of every Shard test

// Installs `parts` (a header first) into `to`.
absl::StatusOr<uint64_t> Install(Shard& to,
                                 const std::vector<v1::ShardStatePart>& parts) {
  size_t next = 1;
  return to.InstallState(parts.at(0).header(),
                         [&](v1::ShardStatePart* p) -> absl::StatusOr<bool> {
                           if (next == parts.size()) return false;
                           *p = parts[next++];
                           return true;
                         });
}

// `from`'s state into `to`, through the parts a stream would carry.
absl::StatusOr<uint64_t> Transfer(
    Shard& from, Shard& to, std::vector<v1::ShardStatePart>* parts = nullptr) {
  std::vector<v1::ShardStatePart> sent;
  uint64_t bytes = 0;
  absl::Status s = from.ExportState(
      7,
      [&](v1::ShardStatePart& p) {
        sent.push_back(p);
        return absl::OkStatus();
      },
      &bytes);
  if (!s.ok()) return s;
  if (parts != nullptr) *parts = sent;
  return Install(to, sent);
}

void ExpectSameState(Shard& a, Shard& b) {
  std::unique_ptr<ChunkTier> left = a.CaptureAll().value();
  std::unique_ptr<ChunkTier> right = b.CaptureAll().value();
  ASSERT_EQ(left->size(), right->size());
  ASSERT_TRUE(left->ForEach([&](const ChunkRecord& x) -> absl::Status {
                    auto y = right->Get(x.id);
                    EXPECT_TRUE(y.ok()) << x.id;
                    if (y.ok()) {
                      EXPECT_TRUE(x == *y) << x.id;
                    }
                    return absl::OkStatus();
                  })
                  .ok());
}

v1::RegisterChunksRequest TwoChunks() {
  v1::RegisterChunksRequest req = OneChunk("w");
  req.mutable_groups(0)->mutable_optimizer()->set_kind(
      v1::OptimizerConfig::ADAMW);
  req.mutable_groups(0)->mutable_optimizer()->set_lr(0.01f);
  *req.add_chunks() = OneChunk("v").chunks(0);
  return req;
}

std::string Grad(float base) {
  std::vector<float> g(kN);
  for (int i = 0; i < kN; ++i) g[i] = base + 0.25f * i;
  return Bytes(g);
}

v1::PushRequest Push(uint64_t member, const char* tensor, int64_t step,
                     bool deferred = false) {
  v1::PushRequest r = PushReq(member, step, 2);
  r.set_chunk_id(ChunkId(tensor, 0));
  r.set_first_sample(member == 1 ? 0 : 2);  // each step tiles [0, 4)
  r.set_deferred(deferred);
  return r;
}

v1::CommitRequest Commit(uint64_t member, int64_t step, uint32_t pushes) {
  v1::CommitRequest r;
  r.set_member_id(member);
  r.set_step(step);
  r.set_scale(0.5f);
  r.set_pushes(pushes);
  return r;
}

// The primary is mid-step when the joiner takes its state: chunk w has
// closed step 1 and v has not (a partly applied update for the ledger), v
// holds member 1's push of step 1 (an open BSP contribution), and w holds
// member 1's deferred push of step 2. The same changes after it bring both
// to the same bits, and the same ledger reports.
TEST(ShardTransfer, BspJoinerMidStepAppliesWhatThePrimaryApplies) {
  Shard primary(Opts("bsp")), joiner(Opts("bsp"));
  std::vector<v1::AppliedReport> primary_reports, joiner_reports;
  primary.set_applied_sink(
      [&](const v1::AppliedReport& r) { primary_reports.push_back(r); });
  joiner.set_applied_sink(
      [&](const v1::AppliedReport& r) { joiner_reports.push_back(r); });
  const v1::View view = MakeView(1, {1, 2}, 1);
  primary.UpdateView(view);
  joiner.UpdateView(view);
  ASSERT_TRUE(primary.Register(TwoChunks()).ok());
  for (uint64_t m : {1, 2}) {
    for (const char* t : {"w", "v"}) {
      ASSERT_TRUE(primary.Push(Push(m, t, 0), Grad(m)).ok());
    }
  }
  ASSERT_TRUE(primary.Push(Push(1, "w", 1), Grad(3)).ok());
  ASSERT_TRUE(primary.Push(Push(2, "w", 1), Grad(4)).ok());        // w closes 1
  ASSERT_TRUE(primary.Push(Push(1, "v", 1), Grad(5)).ok());        // v open
  ASSERT_TRUE(primary.Push(Push(1, "w", 2, true), Grad(6)).ok());  // held
  ASSERT_EQ(primary_reports.size(), 1u);                           // step 0

  auto installed = Transfer(primary, joiner);
  ASSERT_TRUE(installed.ok()) << installed.status();
  EXPECT_EQ(*installed, 2u);
  ExpectSameState(primary, joiner);

  for (Shard* s : {&primary, &joiner}) {
    ASSERT_TRUE(s->Push(Push(2, "v", 1), Grad(7)).ok());  // v closes 1
    ASSERT_TRUE(s->Push(Push(1, "v", 2, true), Grad(8)).ok());
    auto commit = s->Commit(Commit(1, 2, 2));  // needs the held w push
    ASSERT_TRUE(commit.ok()) << commit.status();
    ASSERT_TRUE(s->Push(Push(2, "w", 2), Grad(9)).ok());
    ASSERT_TRUE(s->Push(Push(2, "v", 2), Grad(10)).ok());  // both close 2
  }
  ExpectSameState(primary, joiner);
  uint64_t version = 0;
  PullNow(joiner, 1, -1, &version);
  EXPECT_EQ(version, 3u);
  // Steps 1 and 2 reported by both: the joiner counted w's close of step
  // 1, which came before it joined.
  ASSERT_EQ(joiner_reports.size(), 2u);
  ASSERT_EQ(primary_reports.size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(joiner_reports[i].step(), primary_reports[i + 1].step());
  }
}

// SSP clocks come along: a pull the primary can serve at once, the joiner
// serves at once too, and a repeated push is not applied twice.
TEST(ShardTransfer, SspJoinerKeepsEveryWorkersClock) {
  Shard primary(Opts("ssp:1", absl::Milliseconds(300)));
  Shard joiner(Opts("ssp:1", absl::Milliseconds(300)));
  const v1::View view = MakeView(1, {1, 2}, 1);
  primary.UpdateView(view);
  joiner.UpdateView(view);
  ASSERT_TRUE(primary.Register(TwoChunks()).ok());
  ASSERT_TRUE(primary.Push(Push(1, "w", 0), Grad(1)).ok());
  ASSERT_TRUE(primary.Push(Push(1, "w", 1), Grad(2)).ok());
  ASSERT_TRUE(primary.Push(Push(2, "w", 0), Grad(3)).ok());
  ASSERT_TRUE(Transfer(primary, joiner).ok());
  // Clock 2 under a bound of 1 needs every worker at 1 or more.
  v1::PullRequest pull;
  pull.set_member_id(1);
  pull.set_chunk_id(ChunkId("w", 0));
  pull.set_clock(2);
  std::string out;
  auto served = joiner.Pull(pull, &out);
  ASSERT_TRUE(served.ok()) << served.status();
  for (Shard* s : {&primary, &joiner}) {
    auto again = s->Push(Push(2, "w", 0), Grad(3));  // a retry
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_FALSE(again->applied());
  }
  ExpectSameState(primary, joiner);
}

// A joiner that restored its own older state has it replaced; one holding
// a chunk the primary lacks (another job's) is refused, unchanged; a
// corrupt record is DATA_LOSS.
TEST(ShardTransfer, ReplacesOlderStateAndRefusesAnotherJobs) {
  Shard primary(Opts("asp"));
  const v1::View view = MakeView(1, {1}, 1);
  primary.UpdateView(view);
  ASSERT_TRUE(primary.Register(TwoChunks()).ok());
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(primary.Push(Push(1, "w", step), Grad(step)).ok());
  }
  Shard older(Opts("asp"));
  older.UpdateView(view);
  ASSERT_TRUE(older.Register(TwoChunks()).ok());
  ASSERT_TRUE(older.Push(Push(1, "v", 0), Grad(9)).ok());
  ASSERT_TRUE(Transfer(primary, older).ok());
  ExpectSameState(primary, older);

  Shard other(Opts("asp"));
  other.UpdateView(view);
  v1::RegisterChunksRequest extra = TwoChunks();
  *extra.add_chunks() = OneChunk("u").chunks(0);
  ASSERT_TRUE(other.Register(extra).ok());
  auto refused = Transfer(primary, other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
      << refused.status();
  EXPECT_EQ(other.num_chunks(), 3u);

  std::vector<v1::ShardStatePart> parts;
  Shard scratch(Opts("asp"));
  scratch.UpdateView(view);
  ASSERT_TRUE(Transfer(primary, scratch, &parts).ok());
  // A corrupt record piece, a chunk sent twice, a part out of place.
  auto install = [&](std::vector<v1::ShardStatePart> changed) {
    Shard s(Opts("asp"));
    s.UpdateView(view);
    return Install(s, changed).status();
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i].has_record_piece()) continue;
    std::vector<v1::ShardStatePart> bad = parts;
    bad[i].mutable_record_piece()->back() ^= 1;
    EXPECT_EQ(install(bad).code(), absl::StatusCode::kDataLoss);
    break;
  }
  std::vector<v1::ShardStatePart> twice = parts;
  twice.insert(twice.end(), parts.begin() + 1, parts.begin() + 3);
  EXPECT_EQ(install(twice).code(), absl::StatusCode::kDataLoss);
  std::vector<v1::ShardStatePart> piece_first = {parts[0], parts[2]};
  EXPECT_EQ(install(piece_first).code(), absl::StatusCode::kInvalidArgument);
  // A joiner whose view is older than the primary's waits for its own.
  Shard behind(Opts("asp"));
  EXPECT_EQ(Install(behind, parts).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(behind.num_chunks(), 0u);
}

// A record larger than a piece goes in pieces, and comes back whole.
TEST(ShardTransfer, LargeChunksGoInPieces) {
  Shard primary(Opts("asp")), joiner(Opts("asp"));
  const v1::View view = MakeView(1, {1}, 1);
  primary.UpdateView(view);
  joiner.UpdateView(view);
  v1::RegisterChunksRequest big = TwoChunks();
  constexpr uint64_t kBig = uint64_t{1} << 20;  // 4 MiB of weights, 12 of state
  big.mutable_chunks(0)->set_numel(kBig);
  big.mutable_chunks(0)->set_tensor_shape(0, kBig);
  ASSERT_TRUE(primary.Register(big).ok());
  std::vector<float> g(kBig);
  for (uint64_t i = 0; i < kBig; ++i)
    g[i] = 1e-3f * static_cast<float>(i % 977);
  ASSERT_TRUE(primary.Push(Push(1, "w", 0), Bytes(g)).ok());
  std::vector<v1::ShardStatePart> parts;
  ASSERT_TRUE(Transfer(primary, joiner, &parts).ok());
  size_t pieces = 0, largest = 0;
  for (const auto& p : parts) {
    pieces += p.has_record_piece();
    largest = std::max(largest, p.ByteSizeLong());
  }
  EXPECT_GE(pieces, 4u);
  EXPECT_LE(largest, (size_t{4} << 20) + 1024);
  ExpectSameState(primary, joiner);
}

}  // namespace
}  // namespace strata
