// GptCuda against the CPU Gpt: loss, every gradient, the grad-ready order,
// accumulation and argument checks. Label gpu; skips without a CUDA device.
//
// Both models get the same weights, already rounded to bf16, so the
// difference is the GPU's bf16 activations (8 significant bits, relative
// 2^-8 = 0.4% per rounding, compounded through ~10 ops per block and the
// bf16 residual-stream gradient). Tolerances:
//  - loss: |gpu - cpu| <= 2e-2 + 1e-2 * |cpu| (the loss is ~ln(vocab) = 4);
//  - each gradient tensor: relative L2 error ||gpu - cpu|| / ||cpu|| <= 3e-2,
//    and each element within atol + rtol * |cpu| with rtol = 5e-2 and atol
//    = 5e-2 * max|cpu| over the tensor (bf16 noise scales with the tensor's
//    magnitude, not the element's: many gradients are near zero).
#include "worker/gpt_cuda.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/bf16.h"
#include "gtest/gtest.h"
#include "kernels/cuda_ops.h"
#include "worker/gpt.h"
#include "worker/model.h"

namespace strata {
namespace {

constexpr double kLossAtol = 2e-2, kLossRtol = 1e-2;
constexpr double kGradRelL2 = 3e-2, kGradRtol = 5e-2, kGradAtolOfMax = 5e-2;

GptConfig TinyConfig(bool recompute = false) {
  GptConfig c;
  c.vocab = 64;
  c.context = 16;
  c.layers = 2;
  c.heads = 2;
  c.width = 32;
  c.recompute = recompute;
  return c;
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// Initializes `cpu`, rounds its weights to bf16 and copies them to `gpu`.
void ShareBf16Weights(Gpt& cpu, Model& gpu, uint64_t seed) {
  cpu.InitParams(seed);
  for (size_t i = 0; i < cpu.params().size(); ++i) {
    const int p = static_cast<int>(i);
    const int64_t n = static_cast<int64_t>(cpu.params()[i].spec.numel());
    float* w = cpu.param_data(p);
    for (int64_t j = 0; j < n; ++j) w[j] = Bf16ToFloat(FloatToBf16(w[j]));
    std::copy(w, w + n, gpu.param_data(p));
  }
}

// Checks `got` against `want` (n values) with the tolerances above.
void ExpectGradClose(const float* got, const float* want, int64_t n,
                     const std::string& name) {
  double max_ref = 0, err2 = 0, ref2 = 0;
  for (int64_t j = 0; j < n; ++j) {
    max_ref = std::max(max_ref, std::abs(double{want[j]}));
    err2 += (double{got[j]} - want[j]) * (double{got[j]} - want[j]);
    ref2 += double{want[j]} * want[j];
  }
  EXPECT_LE(std::sqrt(err2), kGradRelL2 * std::sqrt(ref2) + 1e-12) << name;
  const double atol = kGradAtolOfMax * max_ref;
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_NEAR(got[j], want[j], atol + kGradRtol * std::abs(want[j]))
        << name << "[" << j << "]";
  }
}

class GptCudaTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    auto cpu = Gpt::Create(TinyConfig(GetParam()));
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
    auto gpu = GptCuda::Create(TinyConfig(GetParam()));
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

INSTANTIATE_TEST_SUITE_P(Recompute, GptCudaTest, ::testing::Bool());

TEST(GptCuda, DescribesItsDevice) {
  if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto model = CreateModel(TinyConfig(), "cuda");
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
