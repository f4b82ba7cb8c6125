// The ways a worker's gradients reach the servers, and the ways a worker
// computes them, train to the same weights: GPT training through a real
// cluster of `strata` processes on 127.0.0.1 (helpers: train_util.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bf16.h"
#include "tests/process_util.h"
#include "tests/train_util.h"

namespace strata {
namespace {

using testing::BspRun;
using testing::ExpectCloseWeights;
using testing::TrainBsp;

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
  const std::string log =
      testing::ReadFile(testing::TestRoot() + "/ar-ar3/worker0.log");
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

// LAMB and Adafactor with tensors cut into 4 KiB chunks across the two
// servers: each step's update waits for sums over whole tensors, which the
// workers drive (Reduce) after their pushes (and, clipped, their commit);
// the servers report updates applied that way. Two LAMB workers on half
// batches train like one on the whole batch, up to float rounding.
// Adafactor's first step moves each element of a vector by about the sign
// of its gradient (beta2_1 = 0), which the rounding of two workers' sums
// flips where the gradient is near 0 (so two workers differ from one by up
// to twice the step size, with or without chunks cut): here it trains
// (python/tests/test_optimizers.py checks its sums against PyTorch).
TEST(Train, LambAndAdafactorSumOverTensorsCutAcrossServers) {
  for (const char* optimizer : {"lamb", "adafactor"}) {
    SCOPED_TRACE(optimizer);
    const std::vector<std::string> cut = {
        "--grad_clip", "0", "--chunk_size", "4KiB", "--optimizer", optimizer};
    std::string status;
    const BspRun one =
        TrainBsp({"cpu"}, absl::StrCat(optimizer, "-cut"), cut, {}, &status);
    const BspRun two =
        TrainBsp({"cpu", "cpu"}, absl::StrCat(optimizer, "-2"), cut);
    ASSERT_FALSE(one.weights.empty());
    if (std::string(optimizer) == "lamb") {
      ExpectCloseWeights(one, two);
    } else {
      ASSERT_EQ(one.losses.size(), two.losses.size());
      EXPECT_LT(one.losses.back(), one.losses.front());
    }
    int summed = 0;
    for (size_t at = 0; (at = status.find("summed ", at)) != std::string::npos;
         ++at) {
      summed += std::atoi(status.c_str() + at + 7) > 0;
    }
    EXPECT_EQ(summed, 2) << status;
    // Two clipped workers: the commit and the sums go out together.
    std::vector<std::string> clipped = cut;
    clipped[1] = "0.05";
    const BspRun two_clipped =
        TrainBsp({"cpu", "cpu"}, absl::StrCat(optimizer, "-clip2"), clipped);
    ASSERT_EQ(two_clipped.losses.size(), one.losses.size());
    EXPECT_NE(two_clipped.weights, two.weights);
  }
  // The optimizer flag took effect.
  const BspRun adamw =
      TrainBsp({"cpu"}, "adamw1", {"--grad_clip", "0", "--chunk_size", "4KiB"});
  const BspRun lamb = TrainBsp(
      {"cpu"}, "lamb1-again",
      {"--grad_clip", "0", "--chunk_size", "4KiB", "--optimizer", "lamb"});
  EXPECT_NE(adamw.weights, lamb.weights);
}

// The gradient bytes the servers took in ("  in ") or the weight bytes
// they sent ("  out "), summed over servers, from `strata status`.
double MiB(const std::string& status, const std::string& what) {
  double mib = 0;
  for (size_t at = 0; (at = status.find(what, at)) != std::string::npos; ++at) {
    mib += std::atof(status.c_str() + at + what.size());
  }
  return mib;
}

// Compressed pushes and pulls (--compress onebit, topk:R) after a step at
// full precision, through shared memory and in messages: two workers
// train on far fewer gradient and weight bytes than fp32 (ONEBIT: 1/32
// and a bf16 per 64 elements; TOPK at 5%: 8 bytes an element kept; the
// pull of each chunk before compression starts is whole) and end
// elsewhere than uncompressed, their losses falling. With
// --compress_pulls false the pulls are as many bytes as uncompressed.
TEST(Train, CompressedPushesAndPullsTrainOnFewerBytes) {
  const std::vector<std::string> base = {"--grad_clip", "0", "--compress_from",
                                         "1"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return more;
  };
  std::string plain_status;
  const BspRun plain =
      TrainBsp({"cpu", "cpu"}, "compress-none", base, {}, &plain_status);
  const double plain_in = MiB(plain_status, "  in ");
  const double plain_out = MiB(plain_status, "  out ");
  ASSERT_GT(plain_in, 0) << plain_status;
  ASSERT_GT(plain_out, 0) << plain_status;
  for (std::vector<std::string> how :
       {std::vector<std::string>{"--compress", "onebit"},
        {"--compress", "onebit", "--shm", "false"},
        {"--compress", "topk:0.05", "--shm", "false"},
        {"--compress", "topk:0.05", "--compress_pulls", "false"}}) {
    SCOPED_TRACE(absl::StrJoin(how, " "));
    std::string status;
    const BspRun run =
        TrainBsp({"cpu", "cpu"}, absl::StrCat("compress-", how[1], how.size()),
                 with(how), {}, &status);
    const bool pulls =
        std::find(how.begin(), how.end(), "--compress_pulls") == how.end();
    ASSERT_EQ(run.losses.size(), plain.losses.size());
    for (double loss : run.losses) EXPECT_TRUE(std::isfinite(loss));
    EXPECT_LT(run.losses.back(), run.losses.front());
    EXPECT_NE(run.weights, plain.weights);
    // 1 of 6 steps in fp32, 5 at a tenth of it or less; pulls: a whole
    // one more per chunk and worker.
    EXPECT_LT(MiB(status, "  in "), 0.35 * plain_in) << status;
    if (pulls) {
      EXPECT_LT(MiB(status, "  out "), 0.5 * plain_out) << status;
      EXPECT_NE(status.find("pulls compressed"), std::string::npos);
    } else {
      EXPECT_NEAR(MiB(status, "  out "), plain_out, 0.05 * plain_out);
    }
  }
}

// Mixture-of-experts blocks (--experts) train through the servers, each
// expert its own tensors: two BSP workers on half the batch each train to
// the weights of one worker on the whole batch. With room for every token
// (--capacity 8) a token's output depends on no other token; the
// load-balancing loss does (its f and P are means over a worker's
// tokens), so it is off here.
TEST(Train, MixtureOfExpertsTrainsAcrossWorkersLikeOneWorker) {
  const std::vector<std::string> moe = {"--grad_clip", "0", "--experts",   "4",
                                        "--top_k",     "2", "--moe_every", "1",
                                        "--capacity",  "8", "--aux_loss",  "0"};
  const BspRun one = TrainBsp({"cpu"}, "moe-one", moe);
  const BspRun two = TrainBsp({"cpu", "cpu"}, "moe-two", moe);
  ASSERT_FALSE(one.losses.empty());
  EXPECT_LT(one.losses.back(), one.losses.front());
  ExpectCloseWeights(one, two);
}

// --ep: a worker whose experts are split over expert-parallel ranks (CPU
// threads, each with half the worker's sequences) trains to the weights
// and losses of an unsplit worker, the load-balancing loss included (its
// f and P are over the worker's tokens either way); and two BSP workers
// with --ep 2 train to the weights of one unsplit worker on the whole
// batch (aux off: across workers it is per worker).
TEST(Train, ExpertParallelWorkersTrainLikeAnUnsplitOne) {
  auto moe = [](const std::string& aux, std::vector<std::string> more) {
    std::vector<std::string> f = {"--grad_clip", "0", "--experts",   "4",
                                  "--top_k",     "2", "--moe_every", "1",
                                  "--capacity",  "8", "--aux_loss",  aux};
    f.insert(f.end(), more.begin(), more.end());
    return f;
  };
  const BspRun one = TrainBsp({"cpu"}, "ep-one", moe("0.05", {}));
  const BspRun ep2 =
      TrainBsp({"cpu"}, "ep-two-ranks", moe("0.05", {"--ep", "2"}));
  ExpectCloseWeights(one, ep2);
  ASSERT_EQ(ep2.losses.size(), one.losses.size());
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_NEAR(ep2.losses[i], one.losses[i], 1e-5) << "step " << i;
  }
  const BspRun one_plain = TrainBsp({"cpu"}, "ep-one-noaux", moe("0", {}));
  const BspRun two =
      TrainBsp({"cpu", "cpu"}, "ep-two-workers", moe("0", {"--ep", "2"}));
  ExpectCloseWeights(one_plain, two);
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
  const std::string log =
      testing::ReadFile(testing::TestRoot() + "/mp-both/worker0.log");
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
  // Its pinned host buffers moved into the region the servers share.
  const std::string log =
      testing::ReadFile(testing::TestRoot() + "/gpu_vs_cpu_gpu/worker0.log");
  EXPECT_NE(log.find("weights and gradients are in shared memory"),
            std::string::npos)
      << log;
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

}  // namespace
}  // namespace strata
