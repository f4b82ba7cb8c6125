// CreateModel: the device names it accepts, and a clean error (not a crash)
// for "cuda" where there is no CUDA build or no device. Runs on any machine.
#include "model/model.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "model/gpt.h"

namespace strata {
namespace {

GptConfig TinyConfig() {
  GptConfig c;
  c.vocab = 32;
  c.context = 8;
  c.layers = 1;
  c.heads = 2;
  c.width = 16;
  return c;
}

TEST(CreateModel, CpuBuildsTheCpuGpt) {
  auto model = CreateModel(TinyConfig(), Device::kCpu);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->device(), "cpu");
  EXPECT_EQ((*model)->peak_flops(), 0);
  auto gpt = Gpt::Create(TinyConfig());
  ASSERT_TRUE(gpt.ok());
  EXPECT_EQ((*model)->num_params(), (*gpt)->num_params());
  ASSERT_EQ((*model)->params().size(), (*gpt)->params().size());
  for (size_t i = 0; i < (*gpt)->params().size(); ++i) {
    EXPECT_EQ((*model)->params()[i].spec.name, (*gpt)->params()[i].spec.name);
  }
}

TEST(CreateModel, CpuModelTrainsThroughTheInterface) {
  auto model = CreateModel(TinyConfig(), Device::kCpu);
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> targets = {2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<int> ready;
  m.SetGradReadyCallback([&](int i) { ready.push_back(i); });
  auto loss = m.ForwardBackward(tokens.data(), targets.data(), 1, 8);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(ready.size(), m.params().size());
  auto eval = m.Loss(tokens.data(), targets.data(), 1, 8);
  ASSERT_TRUE(eval.ok());
  EXPECT_FLOAT_EQ(*eval, *loss);
}

TEST(CreateModel, CudaWithoutDeviceIsUnavailable) {
  auto model = CreateModel(TinyConfig(), Device::kCuda);
  if (model.ok()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnavailable)
      << model.status();
  EXPECT_FALSE(model.status().message().empty());
}

TEST(ParseDevice, UnknownDeviceIsInvalidArgument) {
  for (const char* device : {"tpu", "", "CPU", "cuda:0"}) {
    EXPECT_EQ(ParseDevice(device).status().code(),
              absl::StatusCode::kInvalidArgument)
        << device;
  }
  for (Device d : {Device::kCpu, Device::kCuda}) {
    auto parsed = ParseDevice(DeviceName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
}

TEST(CreateModel, BadConfigIsInvalidArgument) {
  GptConfig c = TinyConfig();
  c.heads = 3;
  EXPECT_EQ(CreateModel(c, Device::kCpu).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
