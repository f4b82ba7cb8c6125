#include "model/hf_gpt2.h"

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "testing/temp_dir.h"

namespace strata {
namespace {

GptConfig Tiny(int vocab = 16) {
  GptConfig c;
  c.vocab = vocab;
  c.context = 8;
  c.layers = 2;
  c.heads = 2;
  c.width = 8;
  return c;
}

std::unique_ptr<Gpt> MakeGpt(uint64_t seed, GptConfig c = Tiny()) {
  auto gpt = Gpt::Create(c);
  EXPECT_TRUE(gpt.ok()) << gpt.status();
  (*gpt)->InitParams(seed);
  return std::move(*gpt);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

std::unique_ptr<SafetensorsFile> Open(const std::string& path) {
  auto f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? std::move(*f) : nullptr;
}

std::vector<float> Param(Gpt& gpt, const std::string& name) {
  for (size_t i = 0; i < gpt.params().size(); ++i) {
    if (gpt.params()[i].spec.name != name) continue;
    const float* p = gpt.param_data(static_cast<int>(i));
    return std::vector<float>(p, p + gpt.params()[i].spec.numel());
  }
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

TEST(HfGpt2, NamesFollowHuggingFacesLayout) {
  auto qkv = HfGpt2Tensor("h.3.attn.qkv.weight");
  ASSERT_TRUE(qkv.ok());
  EXPECT_EQ(qkv->name, "transformer.h.3.attn.c_attn.weight");
  EXPECT_TRUE(qkv->transpose);
  auto ln = HfGpt2Tensor("h.0.ln2.bias");
  ASSERT_TRUE(ln.ok());
  EXPECT_EQ(ln->name, "transformer.h.0.ln_2.bias");
  EXPECT_FALSE(ln->transpose);
  EXPECT_EQ(HfGpt2Tensor("lnf.weight")->name, "transformer.ln_f.weight");
  EXPECT_EQ(HfGpt2Tensor("h.1.mlp.gate").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HfGpt2, ExportWritesConv1DMatricesAndStripsTheVocabPadding) {
  auto gpt = MakeGpt(1);
  const std::string dir = testing::FreshDir("hf-export");
  ASSERT_TRUE(ExportHfGpt2(*gpt, 10, dir).ok());
  auto file = Open(dir + "/model.safetensors");
  ASSERT_NE(file, nullptr);
  // 2 embeddings + 12 per block + 2 final: no lm_head (tied).
  EXPECT_EQ(file->tensors().size(), 2u + 12 * 2 + 2);
  EXPECT_EQ(file->Find("lm_head.weight"), nullptr);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  const SafetensorsTensor* wte = file->Find("transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{10, 8}));
  const SafetensorsTensor* fc = file->Find("transformer.h.1.mlp.c_fc.weight");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->shape, (std::vector<int64_t>{8, 32}));  // (C, 4C)
  // c_fc[k][r] is Strata's fc[r][k].
  const std::vector<float> ours = Param(*gpt, "h.1.mlp.fc.weight");
  float v;
  ASSERT_TRUE(file->ReadF32(*fc, 3 * 32 + 17, 1, &v).ok());
  EXPECT_EQ(v, ours[17 * 8 + 3]);
  const nlohmann::json config =
      nlohmann::json::parse(ReadBytes(dir + "/config.json"));
  EXPECT_EQ(config["vocab_size"], 10);
  EXPECT_EQ(config["n_layer"], 2);
  EXPECT_EQ(config["n_head"], 2);
  EXPECT_EQ(config["n_embd"], 8);
  EXPECT_EQ(config["n_positions"], 8);
  EXPECT_EQ(config["activation_function"], "gelu_new");
}

TEST(HfGpt2, ExportImportExportIsByteIdentical) {
  auto gpt = MakeGpt(2);
  const std::string a = testing::FreshDir("hf-a"),
                    b = testing::FreshDir("hf-b");
  ASSERT_TRUE(ExportHfGpt2(*gpt, 16, a).ok());
  auto file = Open(a + "/model.safetensors");
  ASSERT_NE(file, nullptr);
  auto config = HfGpt2Config(*file, ReadBytes(a + "/config.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->heads, 2);
  EXPECT_EQ(config->layers, 2);
  auto loaded = MakeGpt(3, *config);
  ASSERT_TRUE(LoadHfGpt2(*file, *loaded).ok());
  for (const ParamInfo& p : gpt->params())
    EXPECT_EQ(Param(*loaded, p.spec.name), Param(*gpt, p.spec.name))
        << p.spec.name;
  ASSERT_TRUE(ExportHfGpt2(*loaded, 16, b).ok());
  EXPECT_EQ(ReadBytes(a + "/model.safetensors"),
            ReadBytes(b + "/model.safetensors"));
  EXPECT_EQ(ReadBytes(a + "/config.json"), ReadBytes(b + "/config.json"));
}

// A published GPT-2 file: names without "transformer.", the attention
// masks as buffers and a tied lm_head; a smaller vocabulary than the model
// (padded with zero rows) and more positions (the first ones taken).
TEST(HfGpt2, ImportsThePublishedNameFormIntoAPaddedModel) {
  auto src = MakeGpt(4, [] {
    GptConfig c = Tiny(10);
    c.context = 12;
    return c;
  }());
  const std::string dir = testing::FreshDir("hf-published");
  ASSERT_TRUE(ExportHfGpt2(*src, 10, dir).ok());
  auto exported = Open(dir + "/model.safetensors");
  ASSERT_NE(exported, nullptr);
  std::vector<std::vector<float>> store;
  std::vector<SafetensorsView> views;
  for (const SafetensorsTensor& t : exported->tensors()) {
    std::vector<float>& v = store.emplace_back(t.numel());
    ASSERT_TRUE(exported->ReadF32(t, 0, t.numel(), v.data()).ok());
    views.push_back({t.name.substr(12), t.shape, v.data()});  // unprefixed
  }
  const std::vector<float> mask(64, 1.0f);
  views.push_back({"h.0.attn.bias", {1, 1, 8, 8}, mask.data()});
  views.push_back({"h.1.attn.masked_bias", {1}, mask.data()});
  views.push_back({"lm_head.weight", {10, 8}, store[0].data()});
  ASSERT_TRUE(WriteSafetensors(dir + "/published.safetensors", {}, views).ok());
  auto file = Open(dir + "/published.safetensors");
  auto model = MakeGpt(5, Tiny(16));  // vocab 16, context 8
  ASSERT_TRUE(LoadHfGpt2(*file, *model).ok());
  const std::vector<float> wte = Param(*model, "wte"),
                           want = Param(*src, "wte");
  EXPECT_EQ(std::vector<float>(wte.begin(), wte.begin() + 80), want);
  EXPECT_EQ(std::vector<float>(wte.begin() + 80, wte.end()),
            std::vector<float>(48, 0.0f));
  const std::vector<float> wpe = Param(*src, "wpe");
  EXPECT_EQ(Param(*model, "wpe"),
            std::vector<float>(wpe.begin(), wpe.begin() + 64));
  EXPECT_EQ(Param(*model, "h.1.attn.qkv.weight"),
            Param(*src, "h.1.attn.qkv.weight"));
  auto specs = HfGpt2InitSpecs(*file, "/srv/gpt2.safetensors", model->params());
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), model->params().size());
  EXPECT_EQ((*specs)[2].source(), "h.0.ln_1.weight");
  EXPECT_EQ((*specs)[4].source(), "h.0.attn.c_attn.weight");
  EXPECT_TRUE((*specs)[4].transpose());
  EXPECT_EQ((*specs)[4].file(), "/srv/gpt2.safetensors");
  EXPECT_EQ((*specs)[4].file_bytes(), file->file_bytes());
}

TEST(HfGpt2, RefusesAFileThatDoesNotFitTheModelNamingTheTensor) {
  auto gpt = MakeGpt(6);
  const std::string dir = testing::FreshDir("hf-bad");
  ASSERT_TRUE(ExportHfGpt2(*gpt, 16, dir).ok());
  auto good = Open(dir + "/model.safetensors");
  ASSERT_NE(good, nullptr);
  struct Case {
    const char* what;
    GptConfig config;
    const char* message;
  };
  GptConfig more_layers = Tiny(), small_vocab = Tiny(8), long_ctx = Tiny(),
            wide = Tiny(), one_layer = Tiny();
  more_layers.layers = 3;
  long_ctx.context = 9;
  wide.width = 16;
  one_layer.layers = 1;
  const Case cases[] = {
      {"missing block", more_layers, "has no tensor transformer.h.2.ln_1"},
      {"vocab too small", small_vocab, "more than the model's vocab of 8"},
      {"context too long", long_ctx, "fewer than the model's context of 9"},
      {"other width", wide, "does not fit"},
      {"extra block", one_layer, "transformer.h.1."},
  };
  for (const Case& c : cases) {
    auto model = MakeGpt(7, c.config);
    absl::Status s = LoadHfGpt2(*good, *model);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << c.what << ": " << s;
    EXPECT_NE(s.message().find(good->path()), std::string::npos) << s;
  }
}

TEST(HfGpt2, ConfigComesFromTheTensorsAndConfigJson) {
  auto gpt = MakeGpt(8);
  const std::string dir = testing::FreshDir("hf-config");
  ASSERT_TRUE(ExportHfGpt2(*gpt, 16, dir).ok());
  auto file = Open(dir + "/model.safetensors");
  auto bare = HfGpt2Config(*file, "");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->vocab, 16);
  EXPECT_EQ(bare->width, 8);
  EXPECT_EQ(bare->context, 8);
  EXPECT_EQ(bare->layers, 2);
  EXPECT_EQ(bare->heads, 0);  // only config.json knows
  EXPECT_EQ(
      HfGpt2Config(*file, R"({"n_head": 2, "n_layer": 5})").status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HfGpt2Config(*file, "{oops").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HfGpt2Config(*file, R"({"n_head": -1})").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Another function than Strata's GPT-2, or another vocabulary than the
  // file's rows, is named and refused.
  for (const char* variant :
       {R"({"n_head": 2, "activation_function": "relu"})",
        R"({"n_head": 2, "layer_norm_epsilon": 1e-6})",
        R"({"n_head": 2, "n_inner": 7})",
        R"({"n_head": 2, "scale_attn_weights": false})",
        R"({"n_head": 2, "scale_attn_by_inverse_layer_idx": true})",
        R"({"n_head": 2, "vocab_size": 10})"}) {
    absl::Status s = HfGpt2Config(*file, variant).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << variant;
    EXPECT_NE(s.message().find(file->path()), std::string::npos) << s;
  }
  for (const char* same :
       {R"({"n_head": 2, "activation_function": "gelu_pytorch_tanh"})",
        R"({"n_head": 2, "layer_norm_epsilon": 1e-05, "n_inner": null})",
        R"({"n_head": 2, "n_inner": 32, "vocab_size": 16})"}) {
    EXPECT_TRUE(HfGpt2Config(*file, same).ok()) << same;
  }
}

TEST(HfGpt2, RefusesAHeadThatIsNotTiedToTheEmbedding) {
  auto gpt = MakeGpt(9);
  const std::string dir = testing::FreshDir("hf-untied");
  ASSERT_TRUE(ExportHfGpt2(*gpt, 16, dir).ok());
  auto exported = Open(dir + "/model.safetensors");
  std::vector<std::vector<float>> store;
  std::vector<SafetensorsView> views;
  for (const SafetensorsTensor& t : exported->tensors()) {
    std::vector<float>& v = store.emplace_back(t.numel());
    ASSERT_TRUE(exported->ReadF32(t, 0, t.numel(), v.data()).ok());
    views.push_back({t.name, t.shape, v.data()});
  }
  const std::vector<float> head(20 * 8, 0.5f);
  views.push_back({"lm_head.weight", {20, 8}, head.data()});
  ASSERT_TRUE(WriteSafetensors(dir + "/untied.safetensors", {}, views).ok());
  auto file = Open(dir + "/untied.safetensors");
  auto model = MakeGpt(10);
  absl::Status s = LoadHfGpt2(*file, *model);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lm_head.weight"), std::string::npos) << s;
}

}  // namespace
}  // namespace strata
