// Strata's GPT-2 export against an independent GPT-2 written in PyTorch in
// Hugging Face's module layout (tests/hf_gpt2_torch.py, run with Debian's
// python3-torch): the same logits for the same tokens from the exported
// file, and a file PyTorch writes read back by Strata, into a model and
// into a local cluster's servers (--init_from) that train from it.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "gtest/gtest.h"
#include "model/gpt.h"
#include "model/hf_gpt2.h"
#include "testing/temp_dir.h"
#include "tests/process_util.h"

namespace strata {
namespace {

constexpr char kPython[] = "/usr/bin/python3";
constexpr int B = 2, T = 16, kVocab = 80, kTokens = 70;

bool HaveTorch() {
  return std::system(absl::StrCat(kPython, " -c 'import torch, numpy' ",
                                  ">/dev/null 2>&1")
                         .c_str()) == 0;
}

template <typename T>
void WriteRaw(const std::string& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = testing::ReadFile(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// A small GPT with every parameter away from its init (non-zero biases,
// LayerNorm gains other than 1), so a swapped or untransposed tensor shows.
std::unique_ptr<Gpt> NoisyGpt() {
  GptConfig c;
  c.vocab = kVocab;
  c.context = T;
  c.layers = 2;
  c.heads = 4;
  c.width = 32;
  auto gpt = Gpt::Create(c);
  EXPECT_TRUE(gpt.ok()) << gpt.status();
  (*gpt)->InitParams(3);
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  for (size_t i = 0; i < (*gpt)->params().size(); ++i) {
    float* p = (*gpt)->param_data(static_cast<int>(i));
    for (uint64_t k = 0; k < (*gpt)->params()[i].spec.numel(); ++k)
      p[k] += noise(rng);
  }
  return std::move(*gpt);
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b,
              int cols_a, int cols) {
  float d = 0;
  for (size_t r = 0; r < a.size() / cols_a; ++r)
    for (int k = 0; k < cols; ++k)
      d = std::max(d, std::abs(a[r * cols_a + k] - b[r * cols + k]));
  return d;
}

class HfGpt2Torch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveTorch()) {
      GTEST_SKIP() << kPython << " cannot import torch and numpy: install "
                   << "python3-torch (scripts/install-deps.sh does)";
    }
    dir_ = testing::FreshDir("hf-torch");
    for (int i = 0; i < B * T; ++i) tokens_.push_back((i * 37 + 11) % kTokens);
    WriteRaw(dir_ + "/tokens.bin", tokens_);
  }

  // Runs the PyTorch side on Strata's export in <dir>/strata and logits;
  // it writes its own model into <dir>/torch. Returns its exit code.
  int RunTorch() {
    const std::string cmd = absl::StrCat(
        kPython, " ", STRATA_SOURCE_DIR, "/tests/hf_gpt2_torch.py ", dir_,
        "/strata ", dir_, "/tokens.bin ", B, " ", T, " ", dir_, "/logits.bin ",
        dir_, "/torch > ", dir_, "/torch.log 2>&1");
    const int rc = std::system(cmd.c_str());
    std::printf("%s", testing::ReadFile(dir_ + "/torch.log").c_str());
    return WEXITSTATUS(rc);
  }

  std::string dir_;
  std::vector<int32_t> tokens_;
};

TEST_F(HfGpt2Torch, PyTorchReproducesTheExportsLogitsAndStrataReadsItsFile) {
  auto gpt = NoisyGpt();
  ASSERT_TRUE(ExportHfGpt2(*gpt, kTokens, dir_ + "/strata").ok());
  auto logits = gpt->Logits(tokens_.data(), B, T);
  ASSERT_TRUE(logits.ok()) << logits.status();
  WriteRaw(dir_ + "/logits.bin", *logits);
  ASSERT_EQ(RunTorch(), 0) << "PyTorch's logits differ by more than 1e-4";

  // PyTorch's file (published GPT-2 names, masks and all) into Strata.
  auto file = SafetensorsFile::Open(dir_ + "/torch/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  auto config =
      HfGpt2Config(**file, testing::ReadFile(dir_ + "/torch/config.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vocab, kTokens);
  auto loaded = Gpt::Create(*config);
  ASSERT_TRUE(loaded.ok());
  ASSERT_TRUE(LoadHfGpt2(**file, **loaded).ok());
  auto ours = (*loaded)->Logits(tokens_.data(), B, T);
  ASSERT_TRUE(ours.ok());
  const std::vector<float> theirs = ReadFloats(dir_ + "/torch/logits.bin");
  ASSERT_EQ(theirs.size(), ours->size());
  EXPECT_LE(MaxDiff(*ours, theirs, kTokens, kTokens), 1e-4f);
  // The SGD step moved the weights: the same logits as before would mean
  // the file was not read.
  EXPECT_GT(MaxDiff(*logits, theirs, kVocab, kTokens), 1e-2f);
}

// --init_from end to end: PyTorch's file is what the servers start from,
// and the job trains from it (a learning rate so small that the exported
// weights stay within 1e-3 of the file's).
TEST_F(HfGpt2Torch, ALocalClusterTrainsFromPyTorchsFile) {
  auto gpt = NoisyGpt();
  ASSERT_TRUE(ExportHfGpt2(*gpt, kTokens, dir_ + "/strata").ok());
  auto logits = gpt->Logits(tokens_.data(), B, T);
  ASSERT_TRUE(logits.ok());
  WriteRaw(dir_ + "/logits.bin", *logits);
  ASSERT_EQ(RunTorch(), 0);
  std::vector<uint16_t> data(4000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = (i * 7 + i / 13) % kTokens;
  ASSERT_TRUE(WriteTokenShard(dir_ + "/data.tok", data).ok());
  testing::Child run({STRATA_BINARY,
                      "local",
                      "--dir",
                      dir_ + "/run",
                      "--servers",
                      "2",
                      "--workers",
                      "1",
                      "--init_from",
                      dir_ + "/torch/model.safetensors",
                      "--data",
                      dir_ + "/data.tok",
                      "--steps",
                      "4",
                      "--batch",
                      "2",
                      "--lr",
                      "1e-6",
                      "--warmup",
                      "0",
                      "--eval_every",
                      "0",
                      "--snapshot_every",
                      "2"},
                     dir_ + "/run.log");
  ASSERT_EQ(run.Wait(), 0) << testing::ReadFile(dir_ + "/run.log");
  testing::Child exp({STRATA_BINARY, "export", "--dir", dir_ + "/run", "--out",
                      dir_ + "/exported"},
                     dir_ + "/export.log");
  ASSERT_EQ(exp.Wait(), 0) << testing::ReadFile(dir_ + "/export.log");
  auto start = SafetensorsFile::Open(dir_ + "/torch/model.safetensors");
  auto end = SafetensorsFile::Open(dir_ + "/exported/model.safetensors");
  ASSERT_TRUE(start.ok() && end.ok());
  int compared = 0;
  for (const SafetensorsTensor& t : (*end)->tensors()) {
    const std::string published = t.name.substr(12);  // no "transformer."
    const SafetensorsTensor* s = (*start)->Find(published);
    ASSERT_NE(s, nullptr) << published;
    ASSERT_EQ(s->shape, t.shape) << t.name;
    std::vector<float> a(t.numel()), b(t.numel());
    ASSERT_TRUE((*start)->ReadF32(*s, 0, a.size(), a.data()).ok());
    ASSERT_TRUE((*end)->ReadF32(t, 0, b.size(), b.data()).ok());
    float d = 0;
    for (size_t i = 0; i < a.size(); ++i)
      d = std::max(d, std::abs(a[i] - b[i]));
    EXPECT_LT(d, 1e-3f) << t.name;
    ++compared;
  }
  EXPECT_EQ(compared, 2 + 12 * 2 + 2);
}

}  // namespace
}  // namespace strata
