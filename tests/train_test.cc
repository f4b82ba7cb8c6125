// GPT training through a real cluster of `strata` processes on 127.0.0.1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/bf16.h"
#include "nlohmann/json.hpp"
#include "tests/process_util.h"

namespace strata {
namespace {

using testing::Child;

// A short text with structure a tiny model can pick up quickly.
std::string WriteCorpus(const std::string& dir) {
  const std::string path = dir + "/corpus.txt";
  std::ofstream f(path);
  for (int i = 0; i < 200; ++i)
    f << "the quick brown fox jumps over the lazy dog. ";
  return path;
}

std::vector<std::string> TinyModelFlags(const std::string& corpus) {
  return {"--layers",  "2",     "--heads",  "2",    "--width", "32",
          "--context", "32",    "--data",   corpus, "--seed",  "3",
          "--lr",      "0.003", "--warmup", "2"};
}

struct BspRun {
  std::vector<float> weights;  // rank 0's, after the last step
  std::vector<double> losses;  // rank 0's, per step
};

std::vector<double> Losses(const std::string& metrics);

// Trains with one worker process per entry of `devices` ("cpu", or "cuda"
// on the virtual GPU binary); `server_flags` as TestCluster's. With
// `status`, `strata status` at the end goes there.
BspRun TrainBsp(const std::vector<std::string>& devices,
                const std::string& name,
                const std::vector<std::string>& flags = {"--grad_clip", "0"},
                const std::vector<std::string>& server_flags = {},
                std::string* status = nullptr) {
  const int workers = static_cast<int>(devices.size());
  const std::string dir = testing::FreshDir(name);
  const std::string corpus = WriteCorpus(dir);
  testing::TestCluster cluster(STRATA_BINARY, dir, {}, server_flags);
  const std::string address = cluster.address();
  EXPECT_FALSE(address.empty());
  std::vector<std::unique_ptr<Child>> trainers;
  for (int w = 0; w < workers; ++w) {
#ifdef STRATA_VGPU_BINARY
    const char* binary =
        devices[w] == "cuda" ? STRATA_VGPU_BINARY : STRATA_BINARY;
#else
    const char* binary = STRATA_BINARY;
#endif
    std::vector<std::string> args = {
        binary,          "worker",
        "--device",      devices[w],
        "--metrics",     absl::StrCat(dir, "/metrics-", w, ".jsonl"),
        "--scheduler",   address,
        "--workers",     std::to_string(workers),
        "--batch",       "4",
        "--steps",       "6",
        "--eval_every",  "0",
        "--weights_out", dir + "/weights.f32"};
    for (const auto& f : TinyModelFlags(corpus)) args.push_back(f);
    args.insert(args.end(), flags.begin(), flags.end());
    trainers.push_back(
        std::make_unique<Child>(args, absl::StrCat(dir, "/worker", w, ".log")));
  }
  for (auto& t : trainers) EXPECT_EQ(t->Wait(), 0) << t->Output();
  if (status != nullptr) {
    Child st({STRATA_BINARY, "status", "--scheduler", address},
             dir + "/status.log");
    EXPECT_EQ(st.Wait(absl::Seconds(30)), 0) << st.Output();
    *status = st.Output();
  }
  cluster.Stop();
  std::ifstream f(dir + "/weights.f32", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  BspRun run;
  run.weights.resize(bytes.size() / 4);
  std::memcpy(run.weights.data(), bytes.data(), run.weights.size() * 4);
  // Rank 0 is whichever worker joined first; its metrics have every step.
  for (int w = 0; w < workers && run.losses.empty(); ++w) {
    run.losses = Losses(absl::StrCat(dir, "/metrics-", w, ".jsonl"));
  }
  return run;
}

// GPT workers through the trainer as workers die and join under BSP: one
// is killed with SIGKILL mid-run and another joins; the others redo the
// interrupted step, and the servers' audit finds every step's batch applied
// exactly once on every chunk. `flags` go to every worker; the workers'
// logs come back.
std::vector<std::string> KillOneOfThreeAndJoinOne(
    const std::string& name, const std::vector<std::string>& flags,
    bool servers_see_redos = true) {
  const std::string dir = testing::FreshDir(name);
  const std::string corpus = WriteCorpus(dir);
  testing::TestCluster cluster(STRATA_BINARY, dir, {"--lease_ms", "800"});
  const std::string address = cluster.address();
  EXPECT_FALSE(address.empty());
  if (address.empty()) return {};
  std::vector<std::unique_ptr<Child>> trainers;
  constexpr int kSteps = 300, kBatch = 6;
  auto trainer = [&](int w, int wait_for) {
    std::vector<std::string> args = {
        STRATA_BINARY,  "worker",
        "--scheduler",  address,
        "--workers",    std::to_string(wait_for),
        "--batch",      std::to_string(kBatch),
        "--steps",      std::to_string(kSteps),
        "--eval_every", "0",
        "--metrics",    absl::StrCat(dir, "/metrics-", w, ".jsonl")};
    for (const auto& f : TinyModelFlags(corpus)) args.push_back(f);
    args.insert(args.end(), flags.begin(), flags.end());
    return std::make_unique<Child>(args,
                                   absl::StrCat(dir, "/worker", w, ".log"));
  };
  for (int w = 0; w < 3; ++w) trainers.push_back(trainer(w, 3));
  // Kill worker 2 once it has done 20 steps, then start worker 3.
  const std::string metrics2 = dir + "/metrics-2.jsonl";
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  auto lines = [](const std::string& path) {
    std::ifstream f(path);
    return std::count(std::istreambuf_iterator<char>(f),
                      std::istreambuf_iterator<char>(), '\n');
  };
  while (lines(metrics2) < 20 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_GE(lines(metrics2), 20) << trainers[2]->Output();
  EXPECT_EQ(trainers[2]->Stop(SIGKILL), 128 + SIGKILL);
  trainers.push_back(trainer(3, 1));
  for (int w : {0, 1, 3}) {
    EXPECT_EQ(trainers[w]->Wait(), 0) << trainers[w]->Output();
  }
  Child status({STRATA_BINARY, "status", "--scheduler", address},
               dir + "/status.log");
  EXPECT_EQ(status.Wait(absl::Seconds(30)), 0) << status.Output();
  const testing::BspAudit audit = testing::ParseBspAudit(status.Output());
  EXPECT_EQ(audit.servers, 2) << status.Output();
  EXPECT_GT(audit.chunks, 0u);
  EXPECT_EQ(audit.samples, uint64_t{kSteps} * kBatch * audit.chunks)
      << status.Output();
  EXPECT_EQ(audit.tiling_errors, 0u) << status.Output();
  if (servers_see_redos) {
    EXPECT_GT(audit.redone, 0u) << status.Output();
  }
  cluster.Stop();
  std::vector<std::string> logs;
  for (auto& t : trainers) logs.push_back(t->Output());
  return logs;
}

TEST(Train, BspWorkersRedoTheStepAWorkerDiedInAndAJoinerTakesAShare) {
  KillOneOfThreeAndJoinOne("train_elastic", {});
}

// The same with --sync allreduce: the survivors' all-reduce fails when the
// killed worker's connections close, and they redo the step in a newer
// view, in a group formed again without a restart; the joiner is in a
// group too. (The servers see no redone pushes: the failed step never
// reached them.)
TEST(Train, AllReduceWorkersReformTheirGroupAfterADeathAndAJoin) {
  const std::vector<std::string> logs = KillOneOfThreeAndJoinOne(
      "train_elastic_ar", {"--sync", "allreduce"}, false);
  ASSERT_EQ(logs.size(), 4u);
  auto count = [](const std::string& log, const std::string& what) {
    int n = 0;
    for (size_t at = 0; (at = log.find(what, at)) != std::string::npos; ++at)
      ++n;
    return n;
  };
  for (int w : {0, 1}) {
    EXPECT_EQ(count(logs[w], "all-reduce group of 3 formed (rank"), 2)
        << "the first group, and the one with the joiner: " << logs[w];
    EXPECT_GE(count(logs[w], "redoing step"), 1) << logs[w];
  }
  EXPECT_EQ(count(logs[3], "all-reduce group of 3 formed"), 1) << logs[3];
  // Each group's rank 0 deleted the KV keys of the groups before it (the
  // first group's rank 0 had none to delete).
  int deletions = 0;
  for (const std::string& log : logs) {
    deletions += count(log, "keys of earlier groups");
    EXPECT_EQ(count(log, "old all-reduce groups' keys stay"), 0) << log;
  }
  EXPECT_GE(deletions, 1);
}

// Two runs' final weights agree up to float rounding: the largest
// difference is below 1e-4 of the largest weight (AdamW's normalized step
// can amplify rounding in the gradient sums a little over 6 steps).
void ExpectCloseWeights(const BspRun& a, const BspRun& b) {
  ASSERT_FALSE(a.weights.empty());
  ASSERT_EQ(a.weights.size(), b.weights.size());
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    max_diff = std::max(
        max_diff, static_cast<double>(std::fabs(a.weights[i] - b.weights[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(a.weights[i])));
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs)
      << "max |diff| " << max_diff << " of max |w| " << max_abs;
  // And training moved the weights (the comparison is not vacuous).
  EXPECT_GT(max_abs, 0.0);
}

// A server killed with SIGKILL and restarted on its data directory while
// two GPT workers train with the default clipping (pushes held on the
// servers until each worker's Commit): the job rolls back to a snapshot
// both servers hold, the workers drop what the lost server held and redo
// the steps since, and every sample is applied exactly once.
TEST(Train, GptWorkersGoOnAfterAServerRestartsWithOverlappedClipping) {
  const std::string dir = testing::FreshDir("train_server_kill");
  const std::string corpus = WriteCorpus(dir);
  Child scheduler(
      {STRATA_BINARY, "scheduler", "--listen", "127.0.0.1:0", "--num_shards",
       "2", "--lease_ms", "800", "--address_file", dir + "/addr"},
      dir + "/scheduler.log");
  const std::string address = testing::WaitForLine(dir + "/addr");
  ASSERT_FALSE(address.empty()) << scheduler.Output();
  auto server = [&](int s, int n) {
    return testing::SnapshottingServer(STRATA_BINARY, address, dir, s, n, 5);
  };
  std::vector<std::unique_ptr<Child>> servers;
  for (int s = 0; s < 2; ++s) servers.push_back(server(s, 0));
  constexpr int kSteps = 60, kBatch = 4;
  std::vector<std::unique_ptr<Child>> trainers;
  for (int w = 0; w < 2; ++w) {
    std::vector<std::string> args = {
        STRATA_BINARY,  "worker",
        "--scheduler",  address,
        "--workers",    "2",
        "--batch",      std::to_string(kBatch),
        "--steps",      std::to_string(kSteps),
        "--eval_every", "0",
        "--metrics",    absl::StrCat(dir, "/metrics-", w, ".jsonl")};
    for (const auto& f : TinyModelFlags(corpus)) args.push_back(f);
    trainers.push_back(
        std::make_unique<Child>(args, absl::StrCat(dir, "/worker", w, ".log")));
  }
  auto lines = [](const std::string& path) {
    std::ifstream f(path);
    return std::count(std::istreambuf_iterator<char>(f),
                      std::istreambuf_iterator<char>(), '\n');
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (lines(dir + "/metrics-0.jsonl") < 17 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(lines(dir + "/metrics-0.jsonl"), 17) << trainers[0]->Output();
  EXPECT_EQ(servers[1]->Stop(SIGKILL), 128 + SIGKILL);
  auto restarted = server(1, 1);
  for (auto& t : trainers) {
    EXPECT_EQ(t->Wait(absl::Minutes(3)), 0) << t->Output();
  }
  EXPECT_NE(restarted->Output().find("rolled back to step"), std::string::npos)
      << restarted->Output();
  const testing::LedgerCheck ledger =
      testing::CheckLedger(STRATA_BINARY, address, dir, kSteps * kBatch);
  testing::ExpectAppliedOnce(ledger, kSteps * kBatch);
  EXPECT_EQ(servers[0]->Stop(), 0) << servers[0]->Output();
  EXPECT_EQ(restarted->Stop(), 0) << restarted->Output();
  EXPECT_EQ(scheduler.Stop(), 0) << scheduler.Output();
}

TEST(Train, TwoBspWorkersWithHalfTheBatchMatchOneWorkerWithAllOfIt) {
  const BspRun one = TrainBsp({"cpu"}, "bsp1");
  const BspRun two = TrainBsp({"cpu", "cpu"}, "bsp2");
  // The servers average the two half-batch mean gradients weighted by
  // samples: the full-batch mean, up to float rounding in the sums.
  ExpectCloseWeights(one, two);
}

// The ways a worker's gradients reach the servers train to the same
// weights: clipping with the pushes overlapping backward (the servers hold
// them until the worker sends the factor) or after it; payloads through
// shared memory or in gRPC messages; forward overlapping the pulls or
// after them. One worker: bit-identical (the same float operations in the
// same order).
TEST(Train, SyncPathsTrainToTheSameWeights) {
  const std::vector<std::string> clip = {"--grad_clip", "0.05"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), clip.begin(), clip.end());
    return more;
  };
  const BspRun overlapped = TrainBsp({"cpu"}, "clip-overlap", clip);
  const BspRun after =
      TrainBsp({"cpu"}, "clip-after", with({"--overlap_clip", "false"}));
  const BspRun messages =
      TrainBsp({"cpu"}, "clip-grpc", with({"--shm", "false"}));
  const BspRun pull_first =
      TrainBsp({"cpu"}, "pull-first", with({"--forward_during_pull", "false"}));
  const BspRun unclipped = TrainBsp({"cpu"}, "no-clip");
  ASSERT_FALSE(overlapped.weights.empty());
  EXPECT_EQ(overlapped.weights, after.weights);
  EXPECT_EQ(overlapped.losses, after.losses);
  EXPECT_EQ(overlapped.weights, messages.weights);
  EXPECT_EQ(overlapped.weights, pull_first.weights);
  EXPECT_EQ(overlapped.losses, pull_first.losses);
  // The clip did bite (else the comparison proves little about it).
  EXPECT_NE(overlapped.weights, unclipped.weights);
  // Two BSP workers: each clips its own gradient either way. Their shares
  // follow measured speeds, so the two runs may split batches differently:
  // equal up to float rounding, as in the test above.
  const BspRun two_overlapped = TrainBsp({"cpu", "cpu"}, "clip-overlap2", clip);
  const BspRun two_after = TrainBsp({"cpu", "cpu"}, "clip-after2",
                                    with({"--overlap_clip", "false"}));
  ExpectCloseWeights(two_overlapped, two_after);
  const BspRun two_pull_first = TrainBsp(
      {"cpu", "cpu"}, "pull-first2", with({"--forward_during_pull", "false"}));
  ExpectCloseWeights(two_overlapped, two_pull_first);
}

// Gradients pushed as bf16 with error feedback (the servers keep fp32
// weights and moments) train close to fp32 pushes. AdamW's update per
// element is lr * m/sqrt(v), which a relative change of the gradient by one
// bf16 rounding (2^-9, and at most one more carried by error feedback)
// moves by a few times that: over 6 steps at lr 0.003 and a peak of 1 for
// |m/sqrt(v)|, well below 6 * 0.003 * 2^-5 = 5.6e-4, while any missed
// conversion or dropped carry would move weights by up to the whole
// update (6 * 0.003).
TEST(Train, Bf16PushesWithErrorFeedbackTrainCloseToFp32) {
  for (const char* clip : {"0", "0.05"}) {
    const BspRun fp32 = TrainBsp({"cpu"}, "fp32", {"--grad_clip", clip});
    const BspRun bf16 =
        TrainBsp({"cpu"}, "bf16", {"--grad_clip", clip, "--push_bf16"});
    ASSERT_EQ(fp32.weights.size(), bf16.weights.size());
    ASSERT_FALSE(fp32.weights.empty());
    double max_diff = 0;
    for (size_t i = 0; i < fp32.weights.size(); ++i) {
      max_diff = std::max(max_diff,
                          std::fabs(double{fp32.weights[i]} - bf16.weights[i]));
    }
    EXPECT_GT(max_diff, 0.0) << "clip " << clip << ": the rounding did nothing";
    EXPECT_LT(max_diff, 6 * 0.003 / 32) << "clip " << clip;
  }
  // The carried error reaches the pushes: without it the weights differ.
  const BspRun fed = TrainBsp({"cpu"}, "bf16-ef", {"--push_bf16"});
  const BspRun plain = TrainBsp({"cpu"}, "bf16-no-ef",
                                {"--push_bf16", "--error_feedback", "false"});
  EXPECT_NE(fed.weights, plain.weights);
}

// --sync allreduce: the workers all-reduce their gradients among
// themselves over Gloo (groups formed through the scheduler's KV) and each
// pushes its share of the 4 KiB chunks as the whole step's gradient. One
// worker trains bit for bit as through the servers' average (the same float
// operations), with and without clipping; two and three workers agree with
// it up to the rounding of sums taken in another order.
TEST(Train, AllReduceSyncTrainsLikeTheParameterServers) {
  const std::vector<std::string> ps = {"--grad_clip", "0", "--chunk_size",
                                       "4KiB"};
  std::vector<std::string> ar = ps;
  ar.insert(ar.end(), {"--sync", "allreduce"});
  const BspRun ps1 = TrainBsp({"cpu"}, "ar-ps1", ps);
  const BspRun ar1 = TrainBsp({"cpu"}, "ar-ar1", ar);
  ASSERT_FALSE(ps1.weights.empty());
  EXPECT_EQ(ps1.weights, ar1.weights);
  EXPECT_EQ(ps1.losses, ar1.losses);
  std::vector<std::string> ps_clip = {
      "--grad_clip", "0.05", "--overlap_clip", "false", "--chunk_size", "4KiB"};
  std::vector<std::string> ar_clip = ps_clip;
  ar_clip.insert(ar_clip.end(), {"--sync", "allreduce"});
  EXPECT_EQ(TrainBsp({"cpu"}, "ar-ps1c", ps_clip).weights,
            TrainBsp({"cpu"}, "ar-ar1c", ar_clip).weights);
  const BspRun ar2 = TrainBsp({"cpu", "cpu"}, "ar-ar2", ar);
  ExpectCloseWeights(ps1, ar2);
  // One all-reduce per tensor instead of one bucket for the whole model.
  std::vector<std::string> per_tensor = ar;
  per_tensor.insert(per_tensor.end(), {"--bucket_size", "0"});
  ExpectCloseWeights(ps1, TrainBsp({"cpu", "cpu"}, "ar-ar2t", per_tensor));
  const BspRun ar3 = TrainBsp({"cpu", "cpu", "cpu"}, "ar-ar3", ar);
  ExpectCloseWeights(ps1, ar3);
  // The workers did reduce among themselves (the comparisons above would
  // hold through the servers too).
  const std::string log = testing::ReadFile(absl::StrCat(
      testing::TempBase(), "/strata_ar-ar3_", getpid(), "/worker0.log"));
  EXPECT_NE(log.find("all-reduce group of 3 formed"), std::string::npos) << log;
}

// Servers with a RAM budget of two chunks' tiles (4 KiB chunks: 12 KiB of
// weights and AdamW moments each), about a tenth of each server's state,
// spill the rest to disk and read it back ahead of use: one worker trains
// to the same weights bit for bit as with everything in RAM (the servers do
// the same float operations in the same order); two workers agree up to
// the rounding of their speed-dependent shares.
TEST(Train, ServersWithARamBudgetTrainToTheSameWeights) {
  const std::vector<std::string> flags = {"--grad_clip", "0", "--chunk_size",
                                          "4KiB"};
  const std::vector<std::string> budget = {"--data_dir", "@DIR@/server@SHARD@",
                                           "--ram_budget", "24KiB"};
  std::string status;
  const BspRun plain = TrainBsp({"cpu"}, "tier-plain", flags);
  const BspRun tiered =
      TrainBsp({"cpu"}, "tier-budget", flags, budget, &status);
  ASSERT_FALSE(plain.weights.empty());
  EXPECT_EQ(plain.weights, tiered.weights);
  EXPECT_EQ(plain.losses, tiered.losses);
  // The tier was in use: both servers report spilled bytes.
  int spilled = 0;
  for (size_t at = 0; (at = status.find("spilled ", at)) != std::string::npos;
       ++at) {
    spilled += std::atof(status.c_str() + at + 8) > 0.05;  // MiB
  }
  EXPECT_EQ(spilled, 2) << status;
  const BspRun two_plain = TrainBsp({"cpu", "cpu"}, "tier-plain2", flags);
  const BspRun two_tiered =
      TrainBsp({"cpu", "cpu"}, "tier-budget2", flags, budget);
  ExpectCloseWeights(two_plain, two_tiered);
}

// --micro_batches: each worker computes its share of a step in pieces,
// accumulates their gradients weighted by samples and pushes once. Batch 4
// in 3 micro-batches (2, 1, 1 samples), alone and as two BSP workers (2
// samples each: 1, 1), trains like one batch up to float rounding.
TEST(Train, MicroBatchesTrainLikeOneBatch) {
  const BspRun whole = TrainBsp({"cpu"}, "mb-whole");
  const std::vector<std::string> three = {"--grad_clip", "0", "--micro_batches",
                                          "3"};
  const BspRun pieces = TrainBsp({"cpu"}, "mb-pieces", three);
  const BspRun two = TrainBsp({"cpu", "cpu"}, "mb-two", three);
  ExpectCloseWeights(whole, pieces);
  ExpectCloseWeights(whole, two);
  // The loss a worker reports is over its own share: alone, the whole
  // batch's, the sample-weighted mean of its pieces' losses.
  ASSERT_EQ(pieces.losses.size(), whole.losses.size());
  for (size_t i = 0; i < whole.losses.size(); ++i)
    EXPECT_NEAR(pieces.losses[i], whole.losses[i], 1e-4) << "step " << i;
}

// --tp and --pp: a worker whose model is split over tensor-parallel ranks,
// pipeline stages or both (CPU threads) trains through the servers to the
// same weights as an unsplit worker, up to float rounding (the split sums
// in another order), alone and as one of two BSP workers.
TEST(Train, TensorAndPipelineParallelWorkersTrainLikeAnUnsplitOne) {
  const BspRun whole = TrainBsp({"cpu"}, "mp-whole");
  const BspRun tp =
      TrainBsp({"cpu"}, "mp-tp2", {"--grad_clip", "0", "--tp", "2"});
  const BspRun pp =
      TrainBsp({"cpu"}, "mp-pp2",
               {"--grad_clip", "0", "--pp", "2", "--micro_batches", "2"});
  const BspRun both = TrainBsp({"cpu", "cpu"}, "mp-both",
                               {"--grad_clip", "0", "--tp", "2", "--pp", "2"});
  ExpectCloseWeights(whole, tp);
  ExpectCloseWeights(whole, pp);
  ExpectCloseWeights(whole, both);
  ASSERT_EQ(tp.losses.size(), whole.losses.size());
  for (size_t i = 0; i < whole.losses.size(); ++i)
    EXPECT_NEAR(tp.losses[i], whole.losses[i], 1e-4) << "step " << i;
  // The worker did split its model (the comparisons would hold unsplit).
  const std::string log = testing::ReadFile(absl::StrCat(
      testing::TempBase(), "/strata_mp-both_", getpid(), "/worker0.log"));
  EXPECT_NE(log.find("split over 2 tensor-parallel ranks x 2 pipeline"),
            std::string::npos)
      << log;
}

// The mean |difference| between two runs' final weights.
[[maybe_unused]] double MeanAbsDiff(const BspRun& a, const BspRun& b) {
  EXPECT_EQ(a.weights.size(), b.weights.size());
  if (a.weights.empty() || a.weights.size() != b.weights.size()) return 1e9;
  double sum = 0;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    sum += std::fabs(a.weights[i] - b.weights[i]);
  }
  return sum / a.weights.size();
}

// GPU workers (on the virtual GPU: the real GptCuda and launchers over a
// CPU emulation of CUDA) train like CPU workers through the servers: alone,
// and beside a CPU worker in one BSP job. Six AdamW steps at lr 0.003 move
// a weight by up to ~0.018; the GPU's bf16 arithmetic leaves a mean
// difference of ~4e-5 from the CPU run, while a GPU backward that skips
// GELU's derivative (tried) leaves ~1e-3, hence the bound 3e-4.
TEST(Train, GpuWorkersTrainLikeCpuWorkers) {
#ifndef STRATA_VGPU_BINARY
  GTEST_SKIP() << "built without CUDA: no virtual GPU binary";
#else
  const BspRun cpu = TrainBsp({"cpu"}, "gpu_vs_cpu_cpu");
  const BspRun gpu = TrainBsp({"cuda"}, "gpu_vs_cpu_gpu");
  ASSERT_EQ(gpu.losses.size(), 6u);
  EXPECT_LT(gpu.losses.back(), gpu.losses.front());
  EXPECT_LT(MeanAbsDiff(gpu, cpu), 3e-4);

  const BspRun cpu_cpu = TrainBsp({"cpu", "cpu"}, "gpu_vs_cpu_cpu_cpu");
  const BspRun cpu_gpu = TrainBsp({"cpu", "cuda"}, "gpu_vs_cpu_cpu_gpu");
  EXPECT_LT(MeanAbsDiff(cpu_gpu, cpu_cpu), 3e-4);
#endif
}

// A GPU worker may pull its weights as bf16: it rounds them to bf16 on the
// device anyway, so it computes exactly what it would from fp32 pulls (the
// same losses and, pushes being the same, the same weights on the
// servers), with half the bytes. The final weights come in fp32: rounded
// ones would differ from the fp32 run's.
TEST(Train, AGpuWorkerPullsBf16WithoutChangingWhatItComputes) {
#ifndef STRATA_VGPU_BINARY
  GTEST_SKIP() << "built without CUDA: no virtual GPU binary";
#else
  const BspRun bf16 =
      TrainBsp({"cuda"}, "gpu_pull_bf16", {"--grad_clip", "0", "--pull_bf16"});
  const BspRun fp32 = TrainBsp({"cuda"}, "gpu_pull_fp32",
                               {"--grad_clip", "0", "--pull_bf16=false"});
  ASSERT_EQ(bf16.losses.size(), 6u);
  EXPECT_EQ(bf16.losses, fp32.losses);
  EXPECT_EQ(bf16.weights, fp32.weights);
  size_t off_grid = 0;  // final weights that bf16 cannot represent
  for (float w : bf16.weights) off_grid += Bf16ToFloat(FloatToBf16(w)) != w;
  EXPECT_GT(off_grid, bf16.weights.size() / 2);
#endif
}

// A GPU worker's default wire: bf16 for payloads in messages (servers on
// other hosts), fp32 through shared memory (servers on its host).
TEST(Train, AGpuWorkerSendsBf16OnlyOverTheNetworkByDefault) {
#ifndef STRATA_VGPU_BINARY
  GTEST_SKIP() << "built without CUDA: no virtual GPU binary";
#else
  const std::vector<std::string> fp32 = {
      "--grad_clip", "0", "--push_bf16=false", "--pull_bf16=false"};
  auto with = [](std::vector<std::string> a, std::vector<std::string> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const BspRun shm_default = TrainBsp({"cuda"}, "gpu_shm_default");
  const BspRun shm_fp32 = TrainBsp({"cuda"}, "gpu_shm_fp32", fp32);
  const BspRun net_default = TrainBsp({"cuda"}, "gpu_net_default",
                                      {"--grad_clip", "0", "--shm", "false"});
  const BspRun net_fp32 =
      TrainBsp({"cuda"}, "gpu_net_fp32", with(fp32, {"--shm", "false"}));
  ASSERT_FALSE(shm_default.weights.empty());
  EXPECT_EQ(shm_default.weights, shm_fp32.weights);
  EXPECT_EQ(net_fp32.weights, shm_fp32.weights);
  EXPECT_NE(net_default.weights, net_fp32.weights);  // bf16 pushes
#endif
}

std::vector<double> Losses(const std::string& metrics) {
  std::vector<double> out;
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);) {
    out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  }
  return out;
}

// Parameter: a consistency model, or "bsp/cuda" for bsp with GPU workers
// (on the virtual GPU binary, where built).
class LocalRun : public ::testing::TestWithParam<std::string> {};

TEST_P(LocalRun, LearnsAndGenerateSamplesFromItsSnapshot) {
  std::string name = GetParam();
  std::replace(name.begin(), name.end(), ':', '_');
  std::replace(name.begin(), name.end(), '/', '_');
  const bool gpu = GetParam() == "bsp/cuda";
  std::string binary = STRATA_BINARY;
  if (gpu) {
#ifdef STRATA_VGPU_BINARY
    binary = STRATA_VGPU_BINARY;
#else
    GTEST_SKIP() << "built without CUDA: no virtual GPU binary";
#endif
  }
  const std::string dir = testing::FreshDir("local_" + name);
  const std::string corpus = WriteCorpus(dir);
  std::vector<std::string> args = {binary,          "local",
                                   "--dir",         dir + "/run",
                                   "--servers",     "2",
                                   "--workers",     "2",
                                   "--batch",       "8",
                                   "--steps",       "80",
                                   "--eval_every",  "40",
                                   "--consistency", gpu ? "bsp" : GetParam(),
                                   "--device",      gpu ? "cuda" : "cpu"};
  for (const auto& f : TinyModelFlags(corpus)) args.push_back(f);
  Child local(args, dir + "/local.log");
  ASSERT_EQ(local.Wait(absl::Minutes(10)), 0) << local.Output();
  const std::vector<double> losses = Losses(dir + "/run/metrics-0.jsonl");
  if (GetParam().rfind("bsp", 0) == 0) {
    ASSERT_EQ(losses.size(), 80u);
  } else {
    // SSP/ASP: the job is 80 * 8 samples, split by the ledger in
    // proportion to each worker's speed; a worker runs clocks until all
    // are applied, about 80.
    ASSERT_GE(losses.size(), 70u);
    ASSERT_LE(losses.size(), 90u);
  }
  // Byte-level loss starts near ln(256) = 5.5; a model that learned the
  // sentence's letter statistics is far below that. The bound is loose
  // enough for any seed, tight enough that no learning fails it.
  EXPECT_GT(losses.front(), 4.5);
  EXPECT_LT(losses.back(), 2.5);
  // `strata local` draws the curves at the end and names the page.
  EXPECT_NE(local.Output().find("curves in " + dir + "/run/plot.html"),
            std::string::npos)
      << local.Output();
  std::ifstream plot(dir + "/run/plot.html");
  const std::string page((std::istreambuf_iterator<char>(plot)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("data-name=\"worker 0\""), std::string::npos);
  EXPECT_NE(page.find("data-name=\"worker 1\""), std::string::npos);

  Child generate({binary, "generate", "--dir", dir + "/run", "--prompt",
                  "the quick", "--tokens", "40", "--temperature", "0"},
                 dir + "/generate.log");
  ASSERT_EQ(generate.Wait(), 0) << generate.Output();
  const std::string text = generate.Output();
  EXPECT_EQ(text.rfind("the quick", 0), 0u) << text;
  EXPECT_GE(text.size(), std::string("the quick").size() + 40) << text;
}

INSTANTIATE_TEST_SUITE_P(Consistency, LocalRun,
                         ::testing::Values("bsp", "ssp:1", "asp", "bsp/cuda"));

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Every process of a `strata local` run whose command line names `dir`.
int ProcessesNaming(const std::string& dir) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream f(entry.path() / "cmdline");
    std::stringstream ss;
    ss << f.rdbuf();
    if (ss.str().find(dir) != std::string::npos) n++;
  }
  return n;
}

TEST(Train, CtrlCStopsTheWholeLocalCluster) {
  const std::string dir = testing::FreshDir("ctrlc");
  const std::string corpus = WriteCorpus(dir);
  std::vector<std::string> args = {STRATA_BINARY, "local",   "--dir",
                                   dir + "/run",  "--steps", "100000",
                                   "--batch",     "4"};
  for (const auto& f : TinyModelFlags(corpus)) args.push_back(f);
  Child local(args, dir + "/local.log");
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (local.Output().find("step ") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_NE(local.Output().find("step "), std::string::npos) << local.Output();
  EXPECT_GE(ProcessesNaming(dir + "/run"),
            5);  // local, scheduler, 2 servers, workers
  EXPECT_EQ(local.Stop(SIGINT), 130) << local.Output();
  EXPECT_NE(local.Output().find("interrupted"), std::string::npos);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(ProcessesNaming(dir + "/run"), 0)
      << "a process of the cluster outlived Ctrl-C";
}

// A run stopped mid-way goes on from its servers' newest common snapshot
// with `strata local --resume`, with every sample applied once in the end.
TEST(Train, LocalResumesAStoppedRunFromItsServersSnapshots) {
  const std::string dir = testing::FreshDir("resume");
  const std::string corpus = WriteCorpus(dir);
  const std::string run = dir + "/run";
  constexpr int kSteps = 160, kBatch = 8;
  std::vector<std::string> args = {STRATA_BINARY,
                                   "local",
                                   "--dir",
                                   run,
                                   "--steps",
                                   std::to_string(kSteps),
                                   "--batch",
                                   std::to_string(kBatch),
                                   "--snapshot_every",
                                   "20",
                                   "--eval_every",
                                   "0"};
  for (const auto& f : TinyModelFlags(corpus)) args.push_back(f);
  {
    Child first(args, dir + "/first.log");
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (Losses(run + "/metrics-0.jsonl").size() < 50 &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_GE(Losses(run + "/metrics-0.jsonl").size(), 50u) << first.Output();
    EXPECT_EQ(first.Stop(SIGINT), 130) << first.Output();
    EXPECT_NE(first.Output().find("strata local --resume"), std::string::npos)
        << first.Output();
  }
  const size_t stopped_at = Losses(run + "/metrics-0.jsonl").size();
  ASSERT_LT(stopped_at, static_cast<size_t>(kSteps));

  // Flags besides --resume are refused: the run's own apply.
  Child both({STRATA_BINARY, "local", "--resume", run, "--steps", "5"},
             dir + "/both.log");
  EXPECT_EQ(both.Wait(), 1);
  EXPECT_NE(both.Output().find("cannot be combined with --resume"),
            std::string::npos)
      << both.Output();

  Child resumed({STRATA_BINARY, "local", "--resume", run},
                dir + "/resumed.log");
  ASSERT_EQ(resumed.Wait(absl::Minutes(5)), 0) << resumed.Output();
  EXPECT_NE(resumed.Output().find("resuming at step"), std::string::npos)
      << resumed.Output();
  // The metrics go on: the steps after the snapshot are computed again.
  EXPECT_GT(Losses(run + "/metrics-0.jsonl").size(), stopped_at);
  // The ledger, read from the stopped scheduler's directory: every sample
  // of the job applied exactly once across both runs.
  Child ledger(
      {STRATA_BINARY, "ledger", "--dir", run + "/scheduler", "--check"},
      dir + "/ledger.log");
  ASSERT_EQ(ledger.Wait(), 0) << ledger.Output();
  EXPECT_NE(
      ledger.Output().find(absl::StrCat("samples ", kSteps * kBatch, " ")),
      std::string::npos)
      << ledger.Output();
  // Starting a new run in it instead is refused: it holds this one.
  Child again(args, dir + "/again.log");
  EXPECT_EQ(again.Wait(), 1);
  EXPECT_NE(again.Output().find("holds a run already"), std::string::npos)
      << again.Output();
  // A directory that is not a run's is refused clearly.
  Child wrong({STRATA_BINARY, "local", "--resume", dir}, dir + "/wrong.log");
  EXPECT_EQ(wrong.Wait(), 1);
  EXPECT_NE(wrong.Output().find("not the directory of a `strata local` run"),
            std::string::npos)
      << wrong.Output();
}

}  // namespace
}  // namespace strata
