// Helpers of the Shard tests (server/shard_*_test.cc).
#ifndef STRATA_TESTING_SERVER_SHARD_UTIL_H_
#define STRATA_TESTING_SERVER_SHARD_UTIL_H_

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/chunk_plan.h"
#include "common/consistency.h"
#include "server/shard.h"

namespace strata::shard_test {

constexpr int kN = 8;  // elements per test chunk

// Every worker joined at `joined_epoch`.
inline v1::View MakeView(uint64_t epoch, std::vector<uint64_t> workers,
                         uint64_t joined_epoch) {
  v1::View v;
  v.set_epoch(epoch);
  v.set_workers_epoch(joined_epoch);
  for (uint64_t w : workers) {
    auto* m = v.add_workers();
    m->set_id(w);
    m->set_joined_epoch(joined_epoch);
  }
  return v;
}

// Plain SGD with lr 1: an update subtracts the aggregated gradient, so
// weights show exactly what was applied.
inline v1::RegisterChunksRequest OneChunk(const std::string& tensor = "w") {
  v1::RegisterChunksRequest req;
  auto* g = req.add_groups();
  g->set_name("g");
  g->mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  g->mutable_optimizer()->set_lr(1.0f);
  auto* c = req.add_chunks();
  c->set_chunk_id(ChunkId(tensor, 0));
  c->set_tensor(tensor);
  c->set_numel(kN);
  c->set_group("g");
  c->add_tensor_shape(kN);
  return req;
}

inline std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

inline v1::PushRequest PushReq(uint64_t member, int64_t step, uint64_t samples,
                               uint64_t epoch = 1) {
  v1::PushRequest r;
  r.set_member_id(member);
  r.set_epoch(epoch);
  r.set_chunk_id(ChunkId("w", 0));
  r.set_step(step);
  r.set_num_samples(samples);
  return r;
}

inline std::vector<float> PullNow(Shard& shard, uint64_t member, int64_t clock,
                                  uint64_t* version = nullptr) {
  v1::PullRequest r;
  r.set_member_id(member);
  r.set_chunk_id(ChunkId("w", 0));
  r.set_clock(clock);
  std::string out;
  auto res = shard.Pull(r, &out);
  EXPECT_TRUE(res.ok()) << res.status();
  if (version != nullptr && res.ok()) *version = res->version;
  std::vector<float> w(out.size() / 4);
  std::memcpy(w.data(), out.data(), out.size());
  return w;
}

// Waits until `n` pulls wait at `shard`'s gate: each is counted under its
// chunk's lock just before it waits, so a push or a view change from now
// on finds it waiting (no sleep guessing when the threads got there).
inline void WaitForPullsAtTheGate(Shard& shard, int64_t n) {
  while (shard.counters().pulls_waiting.load() < n)
    absl::SleepFor(absl::Milliseconds(1));
}

inline ShardOptions Opts(const char* mode,
                         absl::Duration max_wait = absl::Seconds(5)) {
  ShardOptions o;
  o.consistency = *ParseConsistency(mode);
  o.max_wait = max_wait;
  o.view_wait = absl::Milliseconds(50);
  return o;
}

}  // namespace strata::shard_test

#endif  // STRATA_TESTING_SERVER_SHARD_UTIL_H_
