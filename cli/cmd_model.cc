// `strata generate` and `strata export`: a trained model read back, sampled
// from or written out in Hugging Face's GPT-2 layout.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "cli/ops.h"
#include "common/status.h"
#include "data/dataset.h"
#include "model/hf_gpt2.h"
#include "spdlog/spdlog.h"

namespace strata {
namespace {

struct GenerateOptions {
  std::string dir;
  std::string model;
  int heads = 0;
  std::string prompt = "The ";
  int tokens = 200;
  float temperature = 0.8f;
  uint64_t seed = 1;
  std::string tokens_out;  // the prompt's ids, int32
  std::string logits_out;  // the model's logits for them, fp32
};

// Writes `v`'s bytes to `path`. INTERNAL on an I/O error.
template <typename T>
absl::Status WriteRaw(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(T)));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// --tokens_out and --logits_out: the prompt (its last `context` ids) and
// the model's (1, T, vocab) logits for it, raw little-endian, for a check
// against another implementation (tests/hf_gpt2_torch.py reads them).
absl::Status WritePromptLogits(const GenerateOptions& o, Gpt& gpt,
                               std::vector<int32_t> prompt) {
  const size_t context = static_cast<size_t>(gpt.config().context);
  if (prompt.size() > context)
    prompt.erase(prompt.begin(), prompt.end() - context);
  if (!o.tokens_out.empty())
    STRATA_RETURN_IF_ERROR(WriteRaw(o.tokens_out, prompt));
  if (o.logits_out.empty()) return absl::OkStatus();
  STRATA_ASSIGN_OR_RETURN(
      std::vector<float> logits,
      gpt.Logits(prompt.data(), 1, static_cast<int>(prompt.size())));
  return WriteRaw(o.logits_out, logits);
}

// The prompt's ids: GPT-2 tokens with a tokenizer, else bytes (a byte-level
// model's).
absl::StatusOr<std::vector<int32_t>> EncodePrompt(const std::string& prompt,
                                                  const Gpt2Tokenizer* tok,
                                                  const GptConfig& config) {
  std::vector<int32_t> ids;
  if (tok != nullptr) {
    tok->Encode(prompt, &ids);
    if (ids.empty()) ids.push_back(Gpt2Tokenizer::kEndOfText);
    return ids;
  }
  if (config.vocab != kByteVocab) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model has a vocabulary of ", config.vocab,
        " ids but no tokenizer goes with it (vocab.json and merges.txt in the "
        "run's tokenizer/ directory or beside the model file): only a "
        "byte-level model (vocab 256) needs none"));
  }
  for (unsigned char c : prompt) ids.push_back(c);
  if (ids.empty()) ids.push_back('\n');
  return ids;
}

absl::Status Generate(const GenerateOptions& o) {
  std::unique_ptr<Gpt> gpt;
  std::string tokenizer_dir;
  if (!o.model.empty()) {
    STRATA_ASSIGN_OR_RETURN(gpt, LoadHfModel(o.model, o.heads));
    tokenizer_dir = std::filesystem::path(o.model).parent_path().string();
    if (tokenizer_dir.empty()) tokenizer_dir = ".";
  } else {
    int64_t step = 0;
    STRATA_ASSIGN_OR_RETURN(gpt, LoadRunModel(o.dir, &step));
    tokenizer_dir = o.dir + "/tokenizer";
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt2Tokenizer> tok,
                          LoadTokenizerIn(tokenizer_dir));
  STRATA_ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                          EncodePrompt(o.prompt, tok.get(), gpt->config()));
  STRATA_RETURN_IF_ERROR(WritePromptLogits(o, *gpt, prompt));
  STRATA_ASSIGN_OR_RETURN(
      std::vector<int32_t> out,
      gpt->Generate(prompt, o.tokens, o.temperature, o.seed,
                    tok != nullptr ? tok->vocab_size() : 0));
  std::vector<int32_t> added(out.begin() + prompt.size(), out.end());
  std::string text = o.prompt;
  if (tok != nullptr) {
    STRATA_ASSIGN_OR_RETURN(std::string more, tok->Decode(added));
    text += more;
  } else {
    for (int32_t t : added) text.push_back(static_cast<char>(t));
  }
  std::printf("%s\n", text.c_str());
  return absl::OkStatus();
}

struct ExportOptions {
  std::string dir;
  std::string out;
  int vocab_size = 0;
};

// Exports the newest step every server of the run holds, with the run's
// tokenizer files beside it when it has them.
absl::Status Export(const ExportOptions& o) {
  int64_t step = 0;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, LoadRunModel(o.dir, &step));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt2Tokenizer> tok,
                          LoadTokenizerIn(o.dir + "/tokenizer"));
  if (o.vocab_size > gpt->config().vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vocab_size ", o.vocab_size, " is over the model's ",
                     gpt->config().vocab, " token ids"));
  }
  int vocab = o.vocab_size > 0 ? o.vocab_size : gpt->config().vocab;
  if (o.vocab_size == 0 && tok != nullptr)
    vocab = std::min(vocab, tok->vocab_size());
  STRATA_RETURN_IF_ERROR(ExportHfGpt2(*gpt, vocab, o.out,
                                      {{"strata_step", std::to_string(step)}}));
  if (std::optional<TokenizerFiles> files =
          FindTokenizerFiles(o.dir + "/tokenizer")) {
    STRATA_RETURN_IF_ERROR(CopyTokenizerFiles(*files, o.out));
  }
  std::printf("exported step %lld of %s to %s/model.safetensors (vocab %d)\n",
              static_cast<long long>(step), o.dir.c_str(), o.out.c_str(),
              vocab);
  return absl::OkStatus();
}

}  // namespace

CommandFn AddGenerateCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "generate",
      "Sample text from a run's snapshot or a safetensors GPT-2 file");
  auto o = std::make_shared<GenerateOptions>();
  auto* dir = cmd->add_option(
      "--dir", o->dir,
      "directory of a `strata local` run (its newest common snapshot; the "
      "run may be going on)");
  auto* model = cmd->add_option(
      "--model", o->model,
      "a model.safetensors in Hugging Face's GPT-2 layout (`strata export` "
      "writes one), with its config.json beside it");
  dir->excludes(model);
  cmd->add_option("--heads", o->heads,
                  "with --model: attention heads (over config.json's n_head; "
                  "needed where no config.json is beside the file)");
  cmd->add_option("--prompt", o->prompt, "text to continue")
      ->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "tokens to generate")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature,
                  "sampling temperature (0: greedy)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--tokens_out", o->tokens_out,
                  "write the prompt's token ids here (int32, its last "
                  "context ids)");
  cmd->add_option("--logits_out", o->logits_out,
                  "write the model's logits for the prompt here (fp32, "
                  "(T, vocab)), to compare with another implementation");
  return [o] {
    if (o->dir.empty() == o->model.empty()) {
      return ReportStatus("generate", absl::InvalidArgumentError(
                                          "give --dir RUN or --model FILE"));
    }
    return ReportStatus("generate", Generate(*o));
  };
}

CommandFn AddExportCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export",
      "Write a run's model as model.safetensors + config.json in Hugging "
      "Face's GPT-2 layout (PyTorch and transformers load it)");
  auto o = std::make_shared<ExportOptions>();
  cmd->add_option("--dir", o->dir,
                  "directory of a `strata local` run: its newest step every "
                  "server holds a snapshot of (the run may be going on)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--out", o->out, "directory to write the files into")
      ->required();
  cmd->add_option("--vocab_size", o->vocab_size,
                  "token ids to keep (the rest of a padded vocabulary is "
                  "left out; default: the run's tokenizer's, else the "
                  "model's)")
      ->check(PositiveNumber());
  return [o] { return ReportStatus("export", Export(*o)); };
}

}  // namespace strata
