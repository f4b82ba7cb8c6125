// GPT-2 in Hugging Face's layout (transformers' GPT2LMHeadModel): the
// tensor names and shapes of its `model.safetensors` and the fields of its
// `config.json`, mapped to Strata's parameters (model/gpt.h).
//
//   Strata                      Hugging Face                      shape
//   wte                         transformer.wte.weight            (V, C)
//   wpe                         transformer.wpe.weight            (T, C)
//   h.N.ln1.{weight,bias}       transformer.h.N.ln_1.*            (C)
//   h.N.attn.qkv.weight         transformer.h.N.attn.c_attn.weight  (C, 3C)ᵀ
//   h.N.attn.qkv.bias           transformer.h.N.attn.c_attn.bias  (3C)
//   h.N.attn.proj.weight        transformer.h.N.attn.c_proj.weight  (C, C)ᵀ
//   h.N.ln2.*                   transformer.h.N.ln_2.*
//   h.N.mlp.fc.weight           transformer.h.N.mlp.c_fc.weight   (C, 4C)ᵀ
//   h.N.mlp.proj.weight         transformer.h.N.mlp.c_proj.weight (4C, C)ᵀ
//   lnf.{weight,bias}           transformer.ln_f.*                (C)
//
// ᵀ: Hugging Face's Conv1D keeps (in, out), Strata (out, in). The LM head
// is tied to wte, so lm_head.weight is not written, and is ignored when
// read (one of another shape than wte is refused), as are the
// attention-mask buffers (attn.bias, attn.masked_bias).
// Files published without the "transformer." prefix (saved from GPT2Model)
// are read too. Both models are the same function: pre-LN blocks, the tanh
// GELU ("gelu_new"), LayerNorm eps 1e-5, q|k|v side by side in c_attn.
#ifndef STRATA_MODEL_HF_GPT2_H_
#define STRATA_MODEL_HF_GPT2_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Where a Strata parameter lives in a Hugging Face GPT-2 file.
struct HfTensor {
  std::string name;        // with the "transformer." prefix
  bool transpose = false;  // the file holds the transpose (Conv1D)
};

// The Hugging Face tensor of Strata parameter `name` ("h.3.ln1.weight").
// INVALID_ARGUMENT for a name that is not a GPT parameter.
absl::StatusOr<HfTensor> HfGpt2Tensor(const std::string& name);

// `config` as Hugging Face's GPT-2 config.json, with `vocab_size` (at most
// config.vocab) as its vocabulary.
std::string HfGpt2ConfigJson(const GptConfig& config, int vocab_size);

// The shape a Hugging Face GPT-2 checkpoint gives a Strata model: layers,
// width, context (n_positions) and vocab from the file's tensors, and the
// heads from `config_json` (config.json's text; without it, 0). Errors name
// the file and the field: INVALID_ARGUMENT for a missing wte, wpe or h.0
// tensor, or a config.json that does not parse, disagrees with the tensors
// (vocab_size included: the file's wte has its rows), or asks for another
// function than Strata's GPT-2 (an activation other than the tanh GELU,
// another layer_norm_epsilon or n_inner, unscaled or layer-scaled
// attention).
absl::StatusOr<GptConfig> HfGpt2Config(const SafetensorsFile& file,
                                       const std::string& config_json);

// For each of `params` (a GPT's, Model::params() or GptParams), the file
// tensor it starts from, checked:
// every parameter's tensor is present (either name form) and fits its
// shape (a vocabulary up to the model's, padded with zero rows; positions
// at least the model's context, the first ones taken); every tensor of the
// file is one of the model's or an ignored one. Errors name the file and
// the tensor: INVALID_ARGUMENT for a missing, unfitting or unknown tensor
// or a dtype other than F32, F16 and BF16.
absl::StatusOr<std::vector<HfTensor>> MatchHfGpt2(
    const SafetensorsFile& file, const std::vector<ParamInfo>& params);

// The InitSpecs (FILE) that make the servers start `params` from `file`
// (what --init_from registers), one per parameter, in order; `path` is the
// file's path as the servers will open it. MatchHfGpt2's errors.
absl::StatusOr<std::vector<v1::InitSpec>> HfGpt2InitSpecs(
    const SafetensorsFile& file, const std::string& path,
    const std::vector<ParamInfo>& params);

// Fills every parameter of `model` (param_data) from `file`. MatchHfGpt2's
// errors and the file's read errors; on error the parameters are
// unspecified.
absl::Status LoadHfGpt2(const SafetensorsFile& file, Model& model);

// Writes `model`'s parameters as <out_dir>/model.safetensors in the layout
// above, with wte's rows past `vocab_size` (the tokenizer's vocabulary, at
// most config().vocab) left out, and <out_dir>/config.json, creating
// out_dir. `metadata` goes into the file's __metadata__ ("format": "pt" is
// added, as PyTorch's writer does). The same weights give the same bytes.
// INVALID_ARGUMENT for a vocab_size outside [1, vocab]; INTERNAL for an I/O
// error.
absl::Status ExportHfGpt2(Model& model, int vocab_size,
                          const std::string& out_dir,
                          std::map<std::string, std::string> metadata = {});

}  // namespace strata

#endif  // STRATA_MODEL_HF_GPT2_H_
