// Helpers of the tests of a shard with a RAM budget (server/shard_tier_test.cc,
// server/shard_tier_commit_test.cc): a model of Adam chunks, a spill store in a
// scratch directory, and gradients.
#ifndef STRATA_TESTING_SERVER_SHARD_TIER_UTIL_H_
#define STRATA_TESTING_SERVER_SHARD_TIER_UTIL_H_

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/chunk_plan.h"
#include "common/splitmix.h"
#include "storage/spill_store.h"
#include "testing/temp_dir.h"

namespace strata::shard_tier_test {

constexpr int kChunks = 40;
constexpr int kNumel = 1024;
// Adam: weights and two moments.
constexpr size_t kTile = kNumel * 4 * 3;

using ::strata::testing::ScopedDir;

inline v1::RegisterChunksRequest Model() {
  v1::RegisterChunksRequest req;
  auto* g = req.add_groups();
  g->set_name("g");
  g->mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAMW);
  g->mutable_optimizer()->set_lr(1e-2f);
  g->mutable_optimizer()->set_weight_decay(0.1f);
  for (int i = 0; i < kChunks; ++i) {
    auto* c = req.add_chunks();
    const std::string name = absl::StrCat("t", i);
    c->set_chunk_id(ChunkId(name, 0));
    c->set_tensor(name);
    c->set_numel(kNumel);
    c->set_group("g");
    c->add_tensor_shape(kNumel);
    c->mutable_init()->set_kind(v1::InitSpec::NORMAL);
    c->mutable_init()->set_scale(0.02f);
    c->mutable_init()->set_seed(7);
  }
  return req;
}

inline std::shared_ptr<SpillStore> OpenSpill(const SpillOptions& o) {
  auto s = SpillStore::Open(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::shared_ptr<SpillStore>(*std::move(s)) : nullptr;
}

// With `background` off: no reads ahead, no writes behind, so which tiles
// are resident follows from the uses alone.
inline std::shared_ptr<SpillStore> Spill(
    const std::string& dir, uint64_t budget, bool background = true,
    SpillOptions::Eviction eviction = SpillOptions::Eviction::kLeastRecent) {
  SpillOptions o;
  o.ram_budget = budget;
  o.dir = dir;
  o.eviction = eviction;
  if (!background) {
    o.prefetch_depth = 0;
    o.write_behind = false;
  }
  return OpenSpill(o);
}

inline std::string Gradient(int64_t step, uint64_t worker, int chunk) {
  std::vector<float> g(kNumel);
  uint64_t key = ((step * 131 + worker) * 1000003 + chunk) << 20;
  for (float& x : g) x = (SplitMix(key++) >> 40) * 0x1p-24f * 0.1f - 0.05f;
  return std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4);
}

}  // namespace strata::shard_tier_test

#endif  // STRATA_TESTING_SERVER_SHARD_TIER_UTIL_H_
