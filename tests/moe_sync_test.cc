// Sparse experts (TrainerOptions::sparse_experts) through a real cluster
// of `strata` processes on 127.0.0.1: a worker pulls ahead the experts its
// last step used, pulls the others its routers choose, and sends a zero
// push (no payload) for each expert none of its tokens reached. Many small
// experts and few tokens a worker, so that some are idle every step.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/process_util.h"
#include "tests/train_util.h"

namespace strata {
namespace {

using testing::BspRun;
using testing::ExpectCloseWeights;
using testing::TrainBsp;

constexpr int kExperts = 64;

// One MoE block (block 1 of 2) of 64 experts, top-1, room for every token
// (a token's output depends on no other token) and no aux loss (its f and
// P are means over a worker's tokens).
const std::vector<std::string> kMoe = {
    "--grad_clip", "0", "--experts",   "64", "--expert_hidden", "8",
    "--top_k",     "1", "--moe_every", "2",  "--capacity",      "64",
    "--aux_loss",  "0"};

std::vector<std::string> With(std::vector<std::string> more) {
  more.insert(more.begin(), kMoe.begin(), kMoe.end());
  return more;
}

// The sum over the servers' lines of `strata status` of the number after
// `key` (0 where a line has none).
uint64_t StatusSum(const std::string& status, const std::string& key) {
  uint64_t sum = 0;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    const size_t at = line.find(key);
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(at + key.size());
    rest = rest.substr(0, rest.find_first_of(" )"));
    uint64_t v = 0;
    EXPECT_TRUE(absl::SimpleAtoi(rest, &v)) << line;
    sum += v;
  }
  return sum;
}

// Each step's metrics line of worker 0 in run `name`.
std::vector<nlohmann::json> Metrics(const std::string& name) {
  std::ifstream f(testing::TestRoot() + "/" + name + "/metrics-0.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(f, line);) {
    lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

// The experts a metrics line's (only) MoE layer sent tokens to.
std::set<int> Used(const nlohmann::json& line) {
  std::set<int> used;
  const std::vector<int> load = line["moe_load"][0].get<std::vector<int>>();
  EXPECT_EQ(load.size(), static_cast<size_t>(kExperts));
  for (int e = 0; e < static_cast<int>(load.size()); ++e) {
    if (load[e] > 0) used.insert(e);
  }
  return used;
}

// Two BSP workers on half the batch each train to the weights of one on
// the whole batch: an expert only one worker's tokens reached gets that
// worker's gradient and the other's zero push, weighted by samples as
// zeros would be, and one no token reached is skipped by both runs.
TEST(MoeSync, SparseExpertsTrainAcrossWorkersLikeOneWorker) {
  std::string status;
  const BspRun one = TrainBsp({"cpu"}, "sparse-one", kMoe);
  const BspRun two = TrainBsp({"cpu", "cpu"}, "sparse-two", kMoe, {}, &status);
  ASSERT_FALSE(one.losses.empty());
  EXPECT_LT(one.losses.back(), one.losses.front());
  ExpectCloseWeights(one, two);
  EXPECT_GT(StatusSum(status, "zero pushes "), 0u) << status;
}

// One worker on `device`: the servers get a zero push for each tensor of
// each expert its step left idle, and every other push carries its
// gradient; the metrics say which share of the experts' bytes moved each
// way.
void ExpectAZeroPushForEachIdleExpert(const std::string& device) {
  std::string status;
  const std::string name = "sparse-count-" + device;
  const BspRun run = TrainBsp({device}, name, kMoe, {}, &status);
  ASSERT_FALSE(run.losses.empty());
  EXPECT_LT(run.losses.back(), run.losses.front());
  const std::vector<nlohmann::json> lines = Metrics(name);
  ASSERT_EQ(lines.size(), 6u);
  uint64_t idle = 0;
  std::set<int> before;
  for (size_t s = 0; s < lines.size(); ++s) {
    SCOPED_TRACE(absl::StrCat("step ", s));
    const std::set<int> used = Used(lines[s]);
    ASSERT_FALSE(used.empty());
    ASSERT_LT(used.size(), static_cast<size_t>(kExperts));
    idle += kExperts - used.size();
    EXPECT_DOUBLE_EQ(lines[s]["moe_experts_pushed"].get<double>(),
                     static_cast<double>(used.size()) / kExperts);
    // Pulled: every expert on the first step; then those the step before
    // used (ahead) and those this one routed to (once routed).
    std::set<int> pulled = before;
    pulled.insert(used.begin(), used.end());
    const double want =
        s == 0 ? 1.0 : static_cast<double>(pulled.size()) / kExperts;
    EXPECT_DOUBLE_EQ(lines[s]["moe_experts_pulled"].get<double>(), want);
    before = used;
  }
  // Four tensors an expert, one chunk each; one worker's zero pushes
  // close their steps alone.
  EXPECT_EQ(StatusSum(status, "zero pushes "), 4 * idle) << status;
  EXPECT_EQ(StatusSum(status, "steps closed on them "), 4 * idle) << status;
}

TEST(MoeSync, TheServersGetAZeroPushForEachIdleExpert) {
  ExpectAZeroPushForEachIdleExpert("cpu");
}

// The same from a GPU worker (on the virtual GPU: GptCuda's MoE blocks,
// which route on the host and upload only the routed experts).
TEST(MoeSync, AGpuWorkerPullsAndPushesOnlyItsRoutedExperts) {
#ifndef STRATA_VGPU_BINARY
  GTEST_SKIP() << "built without CUDA: no virtual GPU binary";
#else
  ExpectAZeroPushForEachIdleExpert("cuda");
#endif
}

// A worker split into tensor and pipeline ranks (--tp 2 --pp 2, its MoE
// block whole on each tensor rank) trains to the weights of an unsplit one
// that moves every expert (ParallelGpt names no routed parameter: its
// experts go dense, as with --sparse_experts false).
TEST(MoeSync, TensorAndPipelineRanksTrainLikeOneRank) {
  const BspRun one =
      TrainBsp({"cpu"}, "moe-unsplit", With({"--sparse_experts", "false"}));
  const BspRun split =
      TrainBsp({"cpu"}, "moe-tp-pp", With({"--tp", "2", "--pp", "2"}));
  ASSERT_FALSE(split.losses.empty());
  EXPECT_LT(split.losses.back(), split.losses.front());
  ExpectCloseWeights(one, split);
  // Its metrics: each step's loads (no sparse pull or push shares: the
  // experts moved whole).
  for (const nlohmann::json& line : Metrics("moe-tp-pp")) {
    EXPECT_FALSE(Used(line).empty());
    EXPECT_FALSE(line.contains("moe_experts_pulled")) << line;
  }
}

// --sparse_experts false: every expert is pulled and pushed every step
// (an idle one takes a zero gradient's update), and the weights differ
// from the sparse run's where Adam's moments of an idle expert decayed.
TEST(MoeSync, DenseExpertSyncPushesEveryExpert) {
  std::string status;
  const BspRun dense =
      TrainBsp({"cpu"}, "dense-experts", With({"--sparse_experts", "false"}),
               {}, &status);
  const BspRun sparse = TrainBsp({"cpu"}, "sparse-experts", kMoe);
  EXPECT_EQ(StatusSum(status, "zero pushes "), 0u) << status;
  for (const nlohmann::json& line : Metrics("dense-experts")) {
    EXPECT_FALSE(line.contains("moe_experts_pulled")) << line;
  }
  ASSERT_EQ(dense.weights.size(), sparse.weights.size());
  EXPECT_NE(dense.weights, sparse.weights);
  // The losses agree up to rounding on the first step (same weights),
  // whatever the later steps do.
  ASSERT_FALSE(dense.losses.empty());
  EXPECT_NEAR(dense.losses[0], sparse.losses[0], 1e-6);
}

}  // namespace
}  // namespace strata
