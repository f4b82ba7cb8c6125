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
#include "worker/gpt.h"

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

// The whole text of `path`. NOT_FOUND if it cannot be read.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// A run's model: the config in <dir>/model.json, with the weights of the
// newest snapshot every server holds (LoadFromSnapshots: the servers may
// be running). `step` is set to that snapshot's step.
absl::StatusOr<std::unique_ptr<Gpt>> LoadRunModel(const std::string& dir,
                                                  int64_t* step);

// A model from a safetensors file in Hugging Face's GPT-2 layout, shaped by
// the config.json beside it; `heads` (> 0) stands in for a missing one.
absl::StatusOr<std::unique_ptr<Gpt>> LoadHfModel(const std::string& file,
                                                 int heads);

}  // namespace strata

#endif  // STRATA_CLI_MODEL_FILES_H_
