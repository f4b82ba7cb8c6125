#include "model/hf_gpt2.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "kernels/layernorm.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using json = nlohmann::json;

constexpr char kPrefix[] = "transformer.";
constexpr int kGpt2EndOfText = 50256;

// Strata's name inside a block ("ln1.weight") and Hugging Face's, and
// whether the file holds its transpose.
struct BlockName {
  const char* strata;
  const char* hf;
  bool transpose;
};
constexpr BlockName kBlock[] = {
    {"ln1.weight", "ln_1.weight", false},
    {"ln1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true},
    {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true},
    {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln2.weight", "ln_2.weight", false},
    {"ln2.bias", "ln_2.bias", false},
    {"mlp.fc.weight", "mlp.c_fc.weight", true},
    {"mlp.fc.bias", "mlp.c_fc.bias", false},
    {"mlp.proj.weight", "mlp.c_proj.weight", true},
    {"mlp.proj.bias", "mlp.c_proj.bias", false},
};

// The tensor `hf` (prefixed) in `file`, under either name form.
const SafetensorsTensor* Find(const SafetensorsFile& file,
                              const std::string& hf) {
  const SafetensorsTensor* t = file.Find(hf);
  return t != nullptr ? t : file.Find(hf.substr(sizeof(kPrefix) - 1));
}

// A file tensor that is not a parameter and is not read: the LM head (tied
// to wte) and the attention masks GPT-2 checkpoints carry as buffers.
bool Ignored(const std::string& name) {
  return name == "lm_head.weight" || absl::EndsWith(name, ".attn.bias") ||
         absl::EndsWith(name, ".attn.masked_bias");
}

absl::Status Invalid(const SafetensorsFile& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", what));
}

// The number of blocks the file holds: 1 + the largest N of "h.N.".
int CountLayers(const SafetensorsFile& file) {
  int layers = 0;
  for (const SafetensorsTensor& t : file.tensors()) {
    absl::string_view n = t.name;
    if (absl::StartsWith(n, kPrefix)) n.remove_prefix(sizeof(kPrefix) - 1);
    if (!absl::StartsWith(n, "h.")) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(n, '.');
    int l;
    if (parts.size() > 2 && absl::SimpleAtoi(parts[1], &l) && l >= 0 &&
        l < (1 << 20)) {
      layers = std::max(layers, l + 1);
    }
  }
  return layers;
}

// Reads integer field `key` of config.json into `out` (absent: unchanged).
absl::Status ReadField(const SafetensorsFile& file, const json& j,
                       const char* key, int* out) {
  if (!j.contains(key)) return absl::OkStatus();
  if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0 ||
      j[key].get<int64_t>() > (1 << 20)) {
    return Invalid(file, absl::StrCat("config.json's '", key,
                                      "' is not a positive integer"));
  }
  *out = j[key].get<int>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfTensor> HfGpt2Tensor(const std::string& name) {
  if (name == "wte") return HfTensor{"transformer.wte.weight", false};
  if (name == "wpe") return HfTensor{"transformer.wpe.weight", false};
  if (name == "lnf.weight") return HfTensor{"transformer.ln_f.weight", false};
  if (name == "lnf.bias") return HfTensor{"transformer.ln_f.bias", false};
  std::vector<std::string> parts =
      absl::StrSplit(name, absl::MaxSplits('.', 2));
  int layer;
  if (parts.size() == 3 && parts[0] == "h" &&
      absl::SimpleAtoi(parts[1], &layer)) {
    for (const BlockName& b : kBlock) {
      if (parts[2] == b.strata) {
        return HfTensor{absl::StrCat(kPrefix, "h.", layer, ".", b.hf),
                        b.transpose};
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not a GPT-2 parameter"));
}

std::string HfGpt2ConfigJson(const GptConfig& c, int vocab_size) {
  json j = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", vocab_size},
            {"n_positions", c.context},
            {"n_ctx", c.context},
            {"n_embd", c.width},
            {"n_layer", c.layers},
            {"n_head", c.heads},
            {"n_inner", nullptr},
            {"activation_function", "gelu_new"},
            // kernels::kLayerNormEps, written as the decimal it stands for.
            {"layer_norm_epsilon", 1e-5},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"initializer_range", 0.02},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"}};
  static_assert(kernels::kLayerNormEps == 1e-5f);
  if (vocab_size > kGpt2EndOfText) {  // GPT-2's <|endoftext|>
    j["bos_token_id"] = kGpt2EndOfText;
    j["eos_token_id"] = kGpt2EndOfText;
  }
  return j.dump(2) + "\n";
}

namespace {

// The model's shape from the tensors alone (heads: 0).
absl::StatusOr<GptConfig> ShapeFromTensors(const SafetensorsFile& file) {
  const SafetensorsTensor* wte = Find(file, "transformer.wte.weight");
  const SafetensorsTensor* wpe = Find(file, "transformer.wpe.weight");
  if (wte == nullptr || wpe == nullptr || wte->shape.size() != 2 ||
      wpe->shape.size() != 2) {
    return Invalid(file, "no 2-D wte.weight and wpe.weight: not a GPT-2");
  }
  for (int64_t d : {wte->shape[0], wte->shape[1], wpe->shape[0]}) {
    if (d < 1 || d > (1 << 20)) {
      return Invalid(file, absl::StrCat("wte.weight ", wte->shape[0], "x",
                                        wte->shape[1], " or wpe.weight ",
                                        wpe->shape[0], " rows out of range"));
    }
  }
  GptConfig c;
  c.vocab = static_cast<int>(wte->shape[0]);
  c.width = static_cast<int>(wte->shape[1]);
  c.context = static_cast<int>(wpe->shape[0]);
  c.layers = CountLayers(file);
  c.heads = 0;
  if (c.layers == 0) return Invalid(file, "holds no block (h.0.*)");
  return c;
}

// Refuses config.json settings that make another function than Strata's
// GPT-2 (which the names and shapes alone would not show).
absl::Status CheckSameFunction(const SafetensorsFile& file, const json& j,
                               int width) {
  auto refuse = [&](const char* key) {
    return Invalid(file,
                   absl::StrCat("config.json's '", key, "' is ", j[key].dump(),
                                ": Strata's GPT-2 has no such variant"));
  };
  if (j.contains("activation_function") &&
      (!j["activation_function"].is_string() ||
       !absl::c_linear_search(
           std::vector<std::string>{"gelu_new", "gelu_pytorch_tanh",
                                    "gelu_fast"},
           j["activation_function"].get<std::string>()))) {
    return refuse("activation_function");
  }
  if (j.contains("layer_norm_epsilon") &&
      (!j["layer_norm_epsilon"].is_number() ||
       std::abs(j["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-9)) {
    return refuse("layer_norm_epsilon");
  }
  if (j.contains("n_inner") && !j["n_inner"].is_null() &&
      j["n_inner"] != 4 * width) {
    return refuse("n_inner");
  }
  if (j.value("scale_attn_weights", true) != true)
    return refuse("scale_attn_weights");
  if (j.value("scale_attn_by_inverse_layer_idx", false) != false)
    return refuse("scale_attn_by_inverse_layer_idx");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GptConfig> HfGpt2Config(const SafetensorsFile& file,
                                       const std::string& config_json) {
  STRATA_ASSIGN_OR_RETURN(const GptConfig c, ShapeFromTensors(file));
  if (config_json.empty()) return c;
  const json j = json::parse(config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Invalid(file, "its config.json is not a JSON object");
  STRATA_RETURN_IF_ERROR(CheckSameFunction(file, j, c.width));
  GptConfig from_json = c;
  STRATA_RETURN_IF_ERROR(ReadField(file, j, "n_head", &from_json.heads));
  STRATA_RETURN_IF_ERROR(ReadField(file, j, "n_layer", &from_json.layers));
  STRATA_RETURN_IF_ERROR(ReadField(file, j, "n_embd", &from_json.width));
  STRATA_RETURN_IF_ERROR(ReadField(file, j, "n_positions", &from_json.context));
  STRATA_RETURN_IF_ERROR(ReadField(file, j, "vocab_size", &from_json.vocab));
  if (from_json.layers != c.layers || from_json.width != c.width ||
      from_json.context != c.context || from_json.vocab != c.vocab) {
    return Invalid(
        file, absl::StrCat("config.json (n_layer ", from_json.layers,
                           ", n_embd ", from_json.width, ", n_positions ",
                           from_json.context, ", vocab_size ", from_json.vocab,
                           ") disagrees with the tensors (", c.layers,
                           " blocks, width ", c.width, ", ", c.context,
                           " positions, ", c.vocab, " tokens)"));
  }
  return from_json;
}

absl::StatusOr<std::vector<HfTensor>> MatchHfGpt2(
    const SafetensorsFile& file, const std::vector<ParamInfo>& params) {
  std::vector<HfTensor> out;
  std::set<const SafetensorsTensor*> used;
  for (const ParamInfo& p : params) {
    STRATA_ASSIGN_OR_RETURN(HfTensor hf, HfGpt2Tensor(p.spec.name));
    const SafetensorsTensor* t = Find(file, hf.name);
    if (t == nullptr) {
      return Invalid(file, absl::StrCat("has no tensor ", hf.name, " (for ",
                                        p.spec.name, ")"));
    }
    STRATA_RETURN_IF_ERROR(CheckFits(file, *t, hf.transpose, p.spec.shape));
    const int64_t rows = t->shape[0], want = p.spec.shape[0];
    if (p.spec.name == "wte" && rows > want) {
      return Invalid(file,
                     absl::StrCat(t->name, " holds ", rows,
                                  " token ids, more than the model's vocab of ",
                                  want, " (--vocab)"));
    }
    if (p.spec.name == "wpe" && rows < want) {
      return Invalid(file, absl::StrCat(t->name, " has ", rows,
                                        " positions, fewer than the model's "
                                        "context of ",
                                        want, " (--context)"));
    }
    if (p.spec.name != "wte" && p.spec.name != "wpe" && !hf.transpose &&
        rows != want) {
      return Invalid(file, absl::StrCat(t->name, " has ", rows,
                                        " values, not the model's ", want));
    }
    used.insert(t);
    out.push_back(std::move(hf));
  }
  // The head is tied to wte: a head of another shape is another model.
  const SafetensorsTensor* head = file.Find("lm_head.weight");
  const SafetensorsTensor* wte = Find(file, "transformer.wte.weight");
  if (head != nullptr && wte != nullptr && head->shape != wte->shape) {
    return Invalid(file,
                   "lm_head.weight's shape is not wte.weight's: its head is "
                   "not tied to the embedding, as Strata's GPT-2's is");
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    if (!used.contains(&t) && !Ignored(t.name)) {
      return Invalid(
          file, absl::StrCat("tensor ", t.name, " has no place in the model (",
                             params.size(), " tensors)"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<v1::InitSpec>> HfGpt2InitSpecs(
    const SafetensorsFile& file, const std::string& path,
    const std::vector<ParamInfo>& params) {
  STRATA_ASSIGN_OR_RETURN(std::vector<HfTensor> match,
                          MatchHfGpt2(file, params));
  std::vector<v1::InitSpec> specs;
  for (const HfTensor& hf : match) {
    v1::InitSpec init;
    init.set_kind(v1::InitSpec::FILE);
    init.set_file(path);
    init.set_source(Find(file, hf.name)->name);
    init.set_transpose(hf.transpose);
    init.set_file_bytes(file.file_bytes());
    specs.push_back(std::move(init));
  }
  return specs;
}

absl::Status LoadHfGpt2(const SafetensorsFile& file, Model& model) {
  STRATA_ASSIGN_OR_RETURN(std::vector<HfTensor> match,
                          MatchHfGpt2(file, model.params()));
  for (size_t i = 0; i < match.size(); ++i) {
    const TensorSpec& spec = model.params()[i].spec;
    STRATA_RETURN_IF_ERROR(ReadFitted(
        file, *Find(file, match[i].name), match[i].transpose, spec.shape, 0,
        spec.numel(), model.param_data(static_cast<int>(i))));
  }
  return absl::OkStatus();
}

absl::Status ExportHfGpt2(Model& model, int vocab_size,
                          const std::string& out_dir,
                          std::map<std::string, std::string> metadata) {
  const GptConfig& c = model.config();
  if (c.experts > 0) {
    return absl::InvalidArgumentError(
        "GPT-2's Hugging Face layout has no mixture-of-experts layers: a "
        "model with --experts cannot be exported to it");
  }
  if (vocab_size < 1 || vocab_size > c.vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size ", vocab_size, " is outside [1, ", c.vocab, "]"));
  }
  // Transposed matrices need a buffer of their own; the rest are written
  // from the model's storage as they are.
  std::vector<std::vector<float>> transposed;
  transposed.reserve(model.params().size());
  std::vector<SafetensorsView> views;
  for (size_t i = 0; i < model.params().size(); ++i) {
    const TensorSpec& spec = model.params()[i].spec;
    STRATA_ASSIGN_OR_RETURN(HfTensor hf, HfGpt2Tensor(spec.name));
    const float* data = model.param_data(static_cast<int>(i));
    std::vector<int64_t> shape = spec.shape;
    if (spec.name == "wte") shape[0] = vocab_size;
    if (hf.transpose) {
      const int64_t rows = shape[0], cols = shape[1];
      std::vector<float>& t = transposed.emplace_back(rows * cols);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k) t[k * rows + r] = data[r * cols + k];
      data = t.data();
      shape = {cols, rows};
    }
    views.push_back({hf.name, shape, data});
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  }
  metadata["format"] = "pt";
  STRATA_RETURN_IF_ERROR(
      WriteSafetensors(out_dir + "/model.safetensors", metadata, views));
  // Through a rename, as the weights: never a torn config.json.
  const std::string config = out_dir + "/config.json";
  const std::string temp = absl::StrCat(config, ".tmp-", getpid());
  std::ofstream out(temp, std::ios::trunc);
  out << HfGpt2ConfigJson(c, vocab_size);
  out.close();
  if (!out || std::rename(temp.c_str(), config.c_str()) != 0) {
    std::remove(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", config));
  }
  return absl::OkStatus();
}

}  // namespace strata
