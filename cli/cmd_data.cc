// `strata data`: text files into a token shard, byte-level or with GPT-2's
// tokenizer.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "common/status.h"
#include "data/dataset.h"
#include "data/gpt2_tokenizer.h"
#include "storage/files.h"

namespace strata {
namespace {

// The largest document read (each is read whole).
constexpr size_t kMaxDocumentBytes = size_t{4} << 30;

struct DataOptions {
  std::string tokenizer = "bytes";
  std::string vocab;   // GPT-2's encoder.json
  std::string merges;  // GPT-2's vocab.bpe
  std::string input;
  std::string output;
  std::string format = "strata";  // or "llmc"
};

// Writes `tokens` in the shard format `o` names.
absl::Status WriteShard(const DataOptions& o,
                        const std::vector<uint16_t>& tokens) {
  return o.format == "llmc" ? WriteLlmcShard(o.output, tokens)
                            : WriteTokenShard(o.output, tokens);
}

// The documents `input` names: the file itself, or a folder's regular
// files, recursively, in sorted path order. NOT_FOUND for a missing path
// or a folder without files.
absl::StatusOr<std::vector<std::string>> Documents(const std::string& input) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(input, ec)) {
    if (!fs::is_regular_file(input, ec)) {
      return absl::NotFoundError(absl::StrCat(input, ": no such file"));
    }
    return std::vector<std::string>{input};
  }
  std::vector<std::string> paths;
  for (fs::recursive_directory_iterator it(input, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_regular_file(ec)) paths.push_back(it->path().string());
  }
  if (ec) return absl::NotFoundError(absl::StrCat(input, ": ", ec.message()));
  if (paths.empty()) {
    return absl::NotFoundError(absl::StrCat(input, ": holds no files"));
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// Each document's GPT-2 ids, each preceded by <|endoftext|> as in llm.c's
// data scripts: the id that separates documents, never encoded from text.
absl::StatusOr<std::vector<uint16_t>> Gpt2Tokens(
    const DataOptions& o, const std::vector<std::string>& docs) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt2Tokenizer> tok,
                          Gpt2Tokenizer::Load(o.vocab, o.merges));
  std::vector<uint16_t> tokens;
  std::vector<int32_t> ids;
  for (const std::string& path : docs) {
    STRATA_ASSIGN_OR_RETURN(std::string text,
                            ReadFile(path, kMaxDocumentBytes));
    ids.assign(1, Gpt2Tokenizer::kEndOfText);
    tok->Encode(text, &ids);
    // Load checked that every id fits in uint16.
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  return tokens;
}

absl::Status RunData(const DataOptions& o) {
  const bool gpt2 = o.tokenizer == "gpt2";
  if (gpt2 && (o.vocab.empty() || o.merges.empty())) {
    return absl::InvalidArgumentError(
        "--tokenizer gpt2 needs --vocab (encoder.json) and --merges "
        "(vocab.bpe)");
  }
  if (!gpt2 && (!o.vocab.empty() || !o.merges.empty())) {
    return absl::InvalidArgumentError(
        "--vocab and --merges are for --tokenizer gpt2");
  }
  std::vector<uint16_t> tokens;
  if (gpt2) {
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> docs, Documents(o.input));
    STRATA_ASSIGN_OR_RETURN(tokens, Gpt2Tokens(o, docs));
    STRATA_RETURN_IF_ERROR(WriteShard(o, tokens));
    std::printf("wrote %zu documents, %zu tokens to %s\n", docs.size(),
                tokens.size(), o.output.c_str());
    return absl::OkStatus();
  }
  // Bytes: the files as LoadTokens takes them (shards as shards), as before.
  STRATA_ASSIGN_OR_RETURN(tokens, LoadTokens(o.input, kByteVocab));
  STRATA_RETURN_IF_ERROR(WriteShard(o, tokens));
  const auto docs = Documents(o.input);  // fails for LoadTokens' patterns
  std::printf(
      "wrote %s%zu tokens to %s\n",
      docs.ok() ? absl::StrCat(docs->size(), " documents, ").c_str() : "",
      tokens.size(), o.output.c_str());
  return absl::OkStatus();
}

}  // namespace

CommandFn AddDataCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "data", "Write a token shard (uint16) from text files");
  auto o = std::make_shared<DataOptions>();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "bytes (one token per byte) or gpt2 (GPT-2's BPE; each "
                  "document starts with <|endoftext|>, id 50256)")
      ->check(CLI::IsMember({"bytes", "gpt2"}))
      ->capture_default_str();
  cmd->add_option("--vocab", o->vocab,
                  "GPT-2's encoder.json (or Hugging Face's vocab.json); "
                  "required with --tokenizer gpt2");
  cmd->add_option("--merges", o->merges,
                  "GPT-2's vocab.bpe (or Hugging Face's merges.txt); "
                  "required with --tokenizer gpt2");
  cmd->add_option("--input", o->input,
                  "text file or folder (each file is one document, read as "
                  "text; a folder's files recursively, in path order)")
      ->required();
  cmd->add_option("--output", o->output, "shard to write")->required();
  cmd->add_option("--format", o->format,
                  "strata (STRATOK1 header) or llmc (llm.c's GPT-2 shard: "
                  "a 1024-byte header, magic 20240520)")
      ->check(CLI::IsMember({"strata", "llmc"}))
      ->capture_default_str();
  return [o] { return ReportStatus("data", RunData(*o)); };
}

}  // namespace strata
