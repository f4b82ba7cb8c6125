// GptCuda against the CPU Gpt: loss, every gradient, the grad-ready order,
// accumulation and argument checks. Label gpu; skips without a CUDA device.
//
// The tolerances are testing/gpu_model_test_util.h's.
#include "model/gpt_cuda.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/bf16.h"
#include "gtest/gtest.h"
#include "kernels/cuda_ops.h"
#include "optim/optimizer.h"
#include "testing/gpu_model_test_util.h"
#include "testing/model_test_util.h"
#ifdef STRATA_VIRTUAL_GPU
#include "testing/cuda/virtual_streams.h"
#endif
#include "model/gpt.h"
#include "model/gpt_layout.h"
#include "model/model.h"

namespace strata {
namespace {

using testing::ExpectGradClose;
using testing::kLossAtol;
using testing::kLossRtol;
using testing::ShareBf16Weights;

// Width 32 (head size 16) takes the unfused attention kernels, width 64
// (head size 32) the fused ones.
GptConfig TinyConfig(bool recompute = false, int width = 32) {
  GptConfig c;
  c.vocab = 64;
  c.context = 16;
  c.layers = 2;
  c.heads = 2;
  c.width = width;
  c.recompute = recompute;
  return c;
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// Parameters: recompute, width.
class GptCudaTest : public ::testing::TestWithParam<std::tuple<bool, int>> {
 protected:
  void SetUp() override {
    if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    const auto [recompute, width] = GetParam();
    auto cpu = Gpt::Create(TinyConfig(recompute, width));
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
    auto gpu = GptCuda::Create(TinyConfig(recompute, width));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    ShareBf16Weights(*cpu_, *gpu_, /*seed=*/7);
    tokens_ = RandomTokens(kB * kT, 64, 1);
    targets_ = RandomTokens(kB * kT, 64, 2);
  }

  static constexpr int kB = 3, kT = 16;
  std::unique_ptr<Gpt> cpu_;
  std::unique_ptr<GptCuda> gpu_;
  std::vector<int32_t> tokens_, targets_;
};

TEST_P(GptCudaTest, LossAndGradientsMatchCpu) {
  auto want = cpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT);
  auto got = gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, *want, kLossAtol + kLossRtol * std::abs(*want));
  for (size_t i = 0; i < cpu_->params().size(); ++i) {
    const int p = static_cast<int>(i);
    ExpectGradClose(gpu_->grad_data(p), cpu_->grad_data(p),
                    static_cast<int64_t>(cpu_->params()[i].spec.numel()),
                    cpu_->params()[i].spec.name);
  }
  auto eval = gpu_->Loss(tokens_.data(), targets_.data(), kB, kT);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_NEAR(*eval, *got, 1e-5 + 1e-5 * std::abs(*got));
}

TEST_P(GptCudaTest, GradReadyOrderMatchesCpuAndGradientsAreFinal) {
  std::vector<int> want_order, got_order;
  cpu_->SetGradReadyCallback([&](int i) { want_order.push_back(i); });
  ASSERT_TRUE(
      cpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT).ok());
  // Snapshot each gradient as it is reported: it must already be final.
  std::vector<std::vector<float>> at_ready(gpu_->params().size());
  gpu_->SetGradReadyCallback([&](int i) {
    got_order.push_back(i);
    const float* g = gpu_->grad_data(i);
    at_ready[i].assign(g, g + gpu_->params()[i].spec.numel());
  });
  ASSERT_TRUE(
      gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT).ok());
  EXPECT_EQ(got_order, want_order);
  for (size_t i = 0; i < at_ready.size(); ++i) {
    const float* g = gpu_->grad_data(static_cast<int>(i));
    EXPECT_TRUE(std::equal(at_ready[i].begin(), at_ready[i].end(), g))
        << gpu_->params()[i].spec.name;
  }
}

// Weights uploaded group by group as the trainer's pulls land.
TEST_P(GptCudaTest, ReadsNoParameterBeforeItsWaitReturns) {
  testing::ExpectWaitsBeforeEachParameterIsRead(*gpu_, tokens_.data(),
                                                targets_.data(), kB, kT);
}

// Each block's forward is launched as soon as its weights are up, before
// the waits of the next block: the device computes the first layers while
// the trainer's pulls of later ones are in flight. The virtual GPU counts
// launches (kernels and GEMMs); between a block's last wait and the next
// group's first there must be that block's forward (ten launches or more;
// checked with a margin as six), not only its rounding to bf16 (one).
TEST_P(GptCudaTest, ComputesEachLayerAsItsWeightsArrive) {
#ifndef STRATA_VIRTUAL_GPU
  GTEST_SKIP() << "counts launches on the virtual GPU";
#else
  const int n = static_cast<int>(gpu_->params().size());
  std::vector<int64_t> launched(n, -1);
  gpu_->SetParamWaitCallback([&](int i) {
    launched[i] = vgpu::LaunchesQueued();
    return absl::OkStatus();
  });
  auto loss = gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const int layers = gpu_->config().layers;
  for (int l = 0; l < layers; ++l) {
    // From the block's last wait to the next group's first (the next
    // block's or the final LayerNorm's).
    const int next =
        gpt_layout::kFirstBlockParam + (l + 1) * gpt_layout::kSlotsPerLayer;
    ASSERT_LT(next, n);
    EXPECT_GE(launched[next] - launched[next - 1], 6) << "block " << l;
  }
  gpu_->SetParamWaitCallback(nullptr);
#endif
}

// The host buffers move into storage that is pinned first (on the virtual
// GPU: the new range is pinned, the old ones are not).
TEST_P(GptCudaTest, UseStorageMovesThePinnedHostBuffers) {
  const float* old_weights = gpu_->param_data(0);
  const float* old_grads = gpu_->grad_data(0);
#ifdef STRATA_VIRTUAL_GPU
  // Pinned at creation, weights and gradients (one range: two would share
  // a page, which a driver refuses to pin twice).
  EXPECT_TRUE(vgpu::IsPinned(old_weights, 4));
  EXPECT_TRUE(vgpu::IsPinned(old_grads, 4));
#endif
  std::shared_ptr<float[]> storage = testing::ExpectUseStorageMovesTheBuffers(
      *gpu_, tokens_.data(), targets_.data(), kB, kT);
  ASSERT_NE(storage, nullptr);
#ifdef STRATA_VIRTUAL_GPU
  EXPECT_TRUE(vgpu::IsPinned(storage.get(), gpu_->storage_floats() * 4));
  EXPECT_FALSE(vgpu::IsPinned(old_weights, 4));
  EXPECT_FALSE(vgpu::IsPinned(old_grads, 4));
#else
  (void)old_weights;
  (void)old_grads;
#endif
}

// Where the storage cannot be pinned, nothing moves: the buffers stay
// where they were, pinned, and the model trains as before.
TEST_P(GptCudaTest, UseStorageThatCannotBePinnedMovesNothing) {
#ifndef STRATA_VIRTUAL_GPU
  GTEST_SKIP() << "makes the virtual GPU refuse to pin";
#else
  const float* weights = gpu_->param_data(0);
  std::vector<float> storage(gpu_->storage_floats() + 16);
  float* aligned = reinterpret_cast<float*>(
      (reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64);
  vgpu::FailNextPin();
  const absl::Status s = gpu_->UseStorage(aligned, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(gpu_->param_data(0), weights);
  EXPECT_TRUE(vgpu::IsPinned(weights, 4));
  EXPECT_FALSE(vgpu::IsPinned(aligned, 4));
  auto loss = gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT);
  EXPECT_TRUE(loss.ok()) << loss.status();
#endif
}

TEST_P(GptCudaTest, AccumulateAddsToTheHostGradients) {
  ASSERT_TRUE(
      gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT).ok());
  std::vector<std::vector<float>> once;
  for (size_t i = 0; i < gpu_->params().size(); ++i) {
    const float* g = gpu_->grad_data(static_cast<int>(i));
    once.emplace_back(g, g + gpu_->params()[i].spec.numel());
  }
  ASSERT_TRUE(gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT,
                                    /*accumulate=*/true)
                  .ok());
  for (size_t i = 0; i < once.size(); ++i) {
    std::vector<float> twice = once[i];
    for (float& v : twice) v *= 2;
    // Atomics make repeated runs differ in the last bits only.
    ExpectGradClose(gpu_->grad_data(static_cast<int>(i)), twice.data(),
                    static_cast<int64_t>(twice.size()),
                    gpu_->params()[i].spec.name);
  }
}

TEST_P(GptCudaTest, RejectsBadBatches) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const int32_t* t = tokens_.data();
  const int32_t* y = targets_.data();
  EXPECT_EQ(gpu_->ForwardBackward(t, y, 0, kT).status().code(), kInvalid);
  EXPECT_EQ(gpu_->ForwardBackward(t, y, 1, 0).status().code(), kInvalid);
  EXPECT_EQ(gpu_->ForwardBackward(t, y, 1, 17).status().code(), kInvalid);
  EXPECT_EQ(gpu_->Loss(t, y, 1, 17).status().code(), kInvalid);
  std::vector<int32_t> bad = tokens_;
  bad[5] = 64;
  EXPECT_EQ(gpu_->ForwardBackward(bad.data(), y, kB, kT).status().code(),
            kInvalid);
  EXPECT_EQ(gpu_->ForwardBackward(t, bad.data(), kB, kT).status().code(),
            kInvalid);
  bad[5] = -1;
  EXPECT_EQ(gpu_->Loss(bad.data(), y, kB, kT).status().code(), kInvalid);
  // The model still works after rejecting.
  EXPECT_TRUE(gpu_->ForwardBackward(t, y, kB, kT).ok());
}

TEST_P(GptCudaTest, ShorterBatchAfterLongerStillMatchesCpu) {
  ASSERT_TRUE(
      gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT).ok());
  auto want = cpu_->Loss(tokens_.data(), targets_.data(), 2, 5);
  auto got = gpu_->Loss(tokens_.data(), targets_.data(), 2, 5);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_NEAR(*got, *want, kLossAtol + kLossRtol * std::abs(*want));
}

// Resident training against the CPU model stepped by ApplyUpdate (the
// servers' AdamW) on one repeated batch: the losses follow the same path
// and the weights move the same way. Adam's first steps move each weight
// by about lr whatever its gradient's size, so a tiny gradient whose sign
// bf16 noise flips moves it the other way: the weight changes are
// compared in aggregate (relative L2), not element by element.
TEST_P(GptCudaTest, ResidentTrainingMatchesCpuAdamW) {
  OptimizerParams opt;
  opt.kind = OptimizerParams::kAdamW;
  opt.lr = 1e-2f;
  opt.weight_decay = 0.1f;
  opt.warmup_steps = 2;
  EXPECT_EQ(gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT)
                .status()
                .code(),
            absl::StatusCode::kOk);
  std::vector<std::vector<float>> start, m, v;
  for (size_t i = 0; i < cpu_->params().size(); ++i) {
    const float* w = cpu_->param_data(static_cast<int>(i));
    const size_t n = cpu_->params()[i].spec.numel();
    start.emplace_back(w, w + n);
    m.emplace_back(n, 0.0f);
    v.emplace_back(n, 0.0f);
  }
  ASSERT_TRUE(gpu_->StartResident(opt).ok());
  EXPECT_EQ(gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<float> cpu_losses, gpu_losses;
  for (int step = 0; step < 6; ++step) {
    auto want = cpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT);
    ASSERT_TRUE(want.ok());
    cpu_losses.push_back(*want);
    for (size_t i = 0; i < cpu_->params().size(); ++i) {
      OptimizerParams o = opt;
      if (cpu_->params()[i].spec.group != "decay") o.weight_decay = 0;
      const int p = static_cast<int>(i);
      ApplyUpdate(o, ScheduledLr(o, step), step + 1, cpu_->param_data(p),
                  m[i].data(), v[i].data(), cpu_->grad_data(p), m[i].size());
    }
    auto got =
        gpu_->ResidentStep(tokens_.data(), targets_.data(), kB, kT, step);
    ASSERT_TRUE(got.ok()) << got.status();
    gpu_losses.push_back(*got);
  }
  // Each step's bf16 noise feeds the next, so the bound is wider than one
  // step's (kLossAtol, kLossRtol).
  for (size_t k = 0; k < cpu_losses.size(); ++k) {
    EXPECT_NEAR(gpu_losses[k], cpu_losses[k],
                5e-2 + 2e-2 * std::abs(cpu_losses[k]))
        << "step " << k;
  }
  // The repeated batch is learned: the loss falls well below ln(64) = 4.16.
  EXPECT_LT(gpu_losses.back(), gpu_losses.front() - 0.5);
  // Loss reads the resident weights, which the last update improved.
  auto eval = gpu_->Loss(tokens_.data(), targets_.data(), kB, kT);
  ASSERT_TRUE(eval.ok());
  EXPECT_LT(*eval, gpu_losses.back());
  ASSERT_TRUE(gpu_->StopResident().ok());
  double diff2 = 0, moved2 = 0;
  for (size_t i = 0; i < start.size(); ++i) {
    const float* want = cpu_->param_data(static_cast<int>(i));
    const float* got = gpu_->param_data(static_cast<int>(i));
    for (size_t j = 0; j < start[i].size(); ++j) {
      const double dw_cpu = double{want[j]} - start[i][j];
      const double dw_gpu = double{got[j]} - start[i][j];
      diff2 += (dw_gpu - dw_cpu) * (dw_gpu - dw_cpu);
      moved2 += dw_cpu * dw_cpu;
    }
  }
  EXPECT_GT(moved2, 0);
  EXPECT_LE(std::sqrt(diff2), 0.25 * std::sqrt(moved2));
  // After StopResident the host weights are used again.
  EXPECT_TRUE(
      gpu_->ForwardBackward(tokens_.data(), targets_.data(), kB, kT).ok());
}

TEST_P(GptCudaTest, ResidentRefusesMisuse) {
  OptimizerParams sgd;
  sgd.kind = OptimizerParams::kSgd;
  EXPECT_EQ(gpu_->StartResident(sgd).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->ResidentStep(tokens_.data(), targets_.data(), kB, kT, 0)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  OptimizerParams adam;
  ASSERT_TRUE(gpu_->StartResident(adam).ok());
  EXPECT_EQ(gpu_->StartResident(adam).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu_->ResidentStep(tokens_.data(), targets_.data(), kB, kT, -1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->ResidentStep(tokens_.data(), targets_.data(), kB, kT + 1, 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->StopResident().ok());
  EXPECT_TRUE(gpu_->StopResident().ok());  // idempotent
}

INSTANTIATE_TEST_SUITE_P(RecomputeAndWidth, GptCudaTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(32, 64)));

// A vocabulary of 1000 is padded to 1024 on the device (masked out of the
// loss), chunks of 64K floats make the LM head work in chunks of 64 rows,
// and 17 x 16 = 272 rows leave a ragged last chunk.
TEST(GptCuda, ChunkedHeadMatchesCpu) {
  if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  GptConfig cfg = TinyConfig();
  cfg.vocab = 1000;
  GptCuda::Options options;
  options.head_chunk_floats = 64 * 1024 + 5;  // rounded down to 64 rows
  auto cpu = Gpt::Create(cfg);
  auto gpu = GptCuda::Create(cfg, options);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  ShareBf16Weights(**cpu, **gpu, 3);
  const int B = 17, T = 16;
  const std::vector<int32_t> tokens = RandomTokens(B * T, cfg.vocab, 1);
  const std::vector<int32_t> targets = RandomTokens(B * T, cfg.vocab, 2);
  auto want = (*cpu)->ForwardBackward(tokens.data(), targets.data(), B, T);
  auto got = (*gpu)->ForwardBackward(tokens.data(), targets.data(), B, T);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_NEAR(*got, *want, kLossAtol + kLossRtol * std::abs(*want));
  for (size_t i = 0; i < (*cpu)->params().size(); ++i) {
    const int p = static_cast<int>(i);
    ExpectGradClose((*gpu)->grad_data(p), (*cpu)->grad_data(p),
                    static_cast<int64_t>((*cpu)->params()[i].spec.numel()),
                    (*cpu)->params()[i].spec.name);
  }
}

// The profile names every op class a step runs, with a time for each, and
// sums over steps until taken.
TEST(GptCuda, ProfileTimesEachOpClass) {
  if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  GptCuda::Options options;
  options.profile = true;
  auto gpu = GptCuda::Create(TinyConfig(/*recompute=*/false, 64), options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  (*gpu)->InitParams(1);
  const int B = 2, T = 16;
  const std::vector<int32_t> tokens = RandomTokens(B * T, 64, 1);
  ASSERT_TRUE((*gpu)->StartResident(OptimizerParams{}).ok());
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(
        (*gpu)->ResidentStep(tokens.data(), tokens.data(), B, T, step).ok());
  }
  const auto profile = (*gpu)->TakeProfile();
  std::vector<std::string> names;
  double total_ms = 0;
  for (const auto& [name, ms] : profile) {
    names.push_back(name);
    EXPECT_GE(ms, 0) << name;
    total_ms += ms;
  }
  for (const char* want :
       {"zero_grads", "fwd.encoder", "fwd.layernorm", "fwd.matmul",
        "fwd.attention", "fwd.bias_gelu", "fwd.bias_residual", "fwd.lm_head",
        "fwd.cross_entropy", "bwd.lm_head", "bwd.layernorm", "bwd.matmul",
        "bwd.gelu", "bwd.attention", "bwd.encoder", "adam"}) {
    EXPECT_EQ(std::count(names.begin(), names.end(), want), 1) << want;
  }
  EXPECT_GT(total_ms, 0);
  EXPECT_TRUE((*gpu)->TakeProfile().empty());  // taken
  auto plain = GptCuda::Create(TinyConfig());
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE((*plain)->TakeProfile().empty());
  GptCuda::Options bad;
  bad.head_chunk_floats = 0;
  EXPECT_EQ(GptCuda::Create(TinyConfig(), bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GptCuda, DescribesItsDevice) {
  if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto model = CreateModel(TinyConfig(), Device::kCuda);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->device(), "cuda:0");
  EXPECT_GE((*model)->peak_flops(), 0);
  EXPECT_EQ(GptCuda::Create(TinyConfig(), 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GptCuda, ParamsAreTheCpuModels) {
  if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = GptCuda::Create(TinyConfig());
  auto cpu = Gpt::Create(TinyConfig());
  ASSERT_TRUE(gpu.ok() && cpu.ok());
  ASSERT_EQ((*gpu)->params().size(), (*cpu)->params().size());
  for (size_t i = 0; i < (*cpu)->params().size(); ++i) {
    EXPECT_EQ((*gpu)->params()[i].spec.name, (*cpu)->params()[i].spec.name);
    EXPECT_EQ((*gpu)->params()[i].spec.shape, (*cpu)->params()[i].spec.shape);
    EXPECT_EQ((*gpu)->params()[i].spec.group, (*cpu)->params()[i].spec.group);
  }
  EXPECT_EQ((*gpu)->num_params(), (*cpu)->num_params());
  EXPECT_EQ((*gpu)->flops_per_token(), (*cpu)->flops_per_token());
}

TEST(GptCuda, CreateWithoutDeviceIsUnavailable) {
  if (kernels::cuda::DeviceCount() > 0) GTEST_SKIP() << "a device is present";
  EXPECT_EQ(GptCuda::Create(TinyConfig()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(CudaPeakBf16Flops, KnowsHopperAndAmpere) {
  EXPECT_EQ(CudaPeakBf16Flops("NVIDIA H100 80GB HBM3"), 989e12);
  EXPECT_EQ(CudaPeakBf16Flops("NVIDIA H200"), 989e12);
  EXPECT_EQ(CudaPeakBf16Flops("NVIDIA H100 PCIe"), 756e12);
  EXPECT_EQ(CudaPeakBf16Flops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_EQ(CudaPeakBf16Flops("NVIDIA GeForce RTX 4090"), 0);
}

}  // namespace
}  // namespace strata
