// The files that go with a trained model: its shape (a run's model.json or
// a Hugging Face config.json) and its GPT-2 tokenizer (vocab.json and
// merges.txt), as `strata local`, `generate` and `export` find and keep
// them.
#ifndef STRATA_CLI_MODEL_FILES_H_
#define STRATA_CLI_MODEL_FILES_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/gpt2_tokenizer.h"
#include "formats/safetensors.h"
#include "model/gpt.h"

namespace strata {

// A GPT-2 tokenizer's two files.
struct TokenizerFiles {
  std::string encoder;  // token -> id (JSON)
  std::string merges;   // the ranked merges
};

// The tokenizer files in `dir`: Hugging Face's vocab.json and merges.txt,
// else GPT-2's own release names encoder.json and vocab.bpe; nullopt if
// neither pair is there.
std::optional<TokenizerFiles> FindTokenizerFiles(const std::string& dir);

// Copies `files` into `dir` as vocab.json and merges.txt (creating dir).
absl::Status CopyTokenizerFiles(const TokenizerFiles& files,
                                const std::string& dir);

// Loads the tokenizer in `dir` (FindTokenizerFiles); null if it has none.
absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadTokenizerIn(
    const std::string& dir);

// A run's model: the config in <dir>/model.json, with the weights of the
// newest snapshot every server holds (LoadFromSnapshots: the servers may
// be running). `step` is set to that snapshot's step.
absl::StatusOr<std::unique_ptr<Gpt>> LoadRunModel(const std::string& dir,
                                                  int64_t* step);

// The shape of the model in safetensors `file` (Hugging Face's GPT-2
// layout), from its tensors and the config.json beside it (HfGpt2Config);
// `heads` (> 0) overrides config.json's. INVALID_ARGUMENT, naming the
// file, when the heads are known from neither or the shape is no model
// (GptConfig::Validate); the errors of HfGpt2Config.
absl::StatusOr<GptConfig> HfModelConfig(const SafetensorsFile& file, int heads);

// A model from a safetensors file in Hugging Face's GPT-2 layout, shaped by
// HfModelConfig(file, heads), its weights read (LoadHfGpt2).
absl::StatusOr<std::unique_ptr<Gpt>> LoadHfModel(const std::string& file,
                                                 int heads);

}  // namespace strata

#endif  // STRATA_CLI_MODEL_FILES_H_
