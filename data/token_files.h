// Private to data/ (dataset.h and token_*.cc): the files a --data path names,
// how each holds its tokens, and one file's tokens behind a read-only mapping.
// The rules are documented in data/dataset.h.
#ifndef STRATA_DATA_TOKEN_FILES_H_
#define STRATA_DATA_TOKEN_FILES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace strata {

// How a file holds its tokens.
enum class TokenFormat {
  kStrata,  // "STRATOK1" shard
  kLlmc,    // llm.c GPT-2 shard
  kRaw,     // nanoGPT's headerless uint16 (*.bin)
  kBytes,   // byte-level text: one token per byte
};

// Where a file's tokens lie: `count` tokens from byte `offset`, uint16
// (one byte each for kBytes).
struct TokenLayout {
  TokenFormat format = TokenFormat::kBytes;
  uint64_t offset = 0;
  uint64_t count = 0;
};

// The layout of the file `path`, `size` bytes long, whose first
// min(size, kLlmcHeaderBytes) bytes (or more) are `head`. DATA_LOSS naming
// the file and the field on a bad version, a short header, a count that
// disagrees with `size`, or an odd-length *.bin; FAILED_PRECONDITION for
// an llm.c LLaMA-3 shard. A shard's offset + 2 * count is then `size`.
absl::StatusOr<TokenLayout> ParseTokenLayout(absl::string_view head,
                                             uint64_t size,
                                             const std::string& path);

// INVALID_ARGUMENT naming `path`, the position (first_index + the index
// into `tokens`) and the token if a token is >= vocab.
absl::Status CheckVocab(absl::Span<const uint16_t> tokens, int vocab,
                        const std::string& path, uint64_t first_index = 0);

// A read-only mapping of a whole file; unmapped when destroyed.
struct FileMapping;

// One file's tokens: a span over a read-only mapping of the file (shards),
// or over tokens it owns (text, Create's vector, empty shards). Movable;
// the span stays valid across moves. Immutable once built, except Append.
class TokenFile {
 public:
  // Opens the file at `path` (format by ParseTokenLayout) and checks its
  // tokens against `vocab`. A shard's pages are dropped from this process
  // once checked, so opening does not keep it resident. NOT_FOUND (or
  // another errno's code) if it cannot be opened or read; INVALID_ARGUMENT
  // if it is not a regular file, or text with vocab < 256; the errors of
  // ParseTokenLayout and CheckVocab.
  static absl::StatusOr<TokenFile> Open(const std::string& path, int vocab);

  // Owns `tokens`; `text` marks byte-level text (see Append).
  TokenFile(std::string path, std::vector<uint16_t> tokens, bool text);

  TokenFile(TokenFile&&) noexcept;
  TokenFile& operator=(TokenFile&&) noexcept;
  ~TokenFile();

  absl::Span<const uint16_t> tokens() const;
  const std::string& path() const { return path_; }
  bool mapped() const { return mapping_ != nullptr; }
  bool text() const { return text_; }

  // Appends the tokens of text file `next` (consecutive text files form
  // one segment, as documents of one corpus).
  // REQUIRES: text() and next.text().
  void Append(const TokenFile& next);

 private:
  TokenFile(std::string path, std::unique_ptr<FileMapping> mapping,
            const TokenLayout& layout);

  std::string path_;
  std::unique_ptr<FileMapping> mapping_;  // null when owned_ holds tokens
  const uint16_t* mapped_tokens_ = nullptr;
  uint64_t mapped_count_ = 0;
  std::vector<uint16_t> owned_;
  bool text_ = false;
};

// The files `path` names, in sorted order (see data/dataset.h). NOT_FOUND
// for a pattern with no match or a folder without regular files; a missing
// plain path is returned as is, for opening it to report.
absl::StatusOr<std::vector<std::string>> ListTokenFiles(
    const std::string& path);

// The files TokenDataset::Open reads, by split.
struct DataFiles {
  std::vector<std::string> train;
  std::vector<std::string> eval;  // validation shards; empty: eval_fraction
};

// The files `path` names, split by the validation-shard rules of
// data/dataset.h. The errors of ListTokenFiles; INVALID_ARGUMENT when all
// of a folder's or pattern's files are validation shards.
absl::StatusOr<DataFiles> FindDataFiles(const std::string& path);

// Whether the name of `file` marks a validation shard (val.bin, *_val.bin,
// *_val_*.bin).
bool IsValidationShard(const std::string& file);

// The glob(3) pattern of the validation shards beside the train data that
// `path` names (rule 2 in data/dataset.h), or "" if its name has no "train"
// word or does not end in .bin. `literal`: `path` is a file name, whose
// glob characters are escaped, not a pattern.
std::string ValidationPatternFor(const std::string& path, bool literal);

}  // namespace strata

#endif  // STRATA_DATA_TOKEN_FILES_H_
