// Training data for the worker: token files (Strata's, llm.c's and
// nanoGPT's shards, byte-level text), memory-mapped, and deterministic
// sampling of fixed-length windows from them.
//
// Formats (all integers little-endian), told apart by a file's first bytes:
//   - Strata shard: "STRATOK1", u32 version (1), u64 token count, then that
//     many uint16 tokens, and nothing after.
//   - llm.c GPT-2 shard: a header of 256 int32 (1024 bytes): magic
//     20240520, version 1, token count, the rest zero; then that many
//     uint16 tokens, and nothing after. llm.c's LLaMA-3 shards (magic
//     20240801, version 7, uint32 tokens) are refused.
//   - nanoGPT: a file named *.bin that starts with neither magic is
//     headerless uint16 tokens (train.bin, val.bin); it has an even length.
//     (A nanoGPT file whose first two tokens spell an llm.c magic is read
//     as an llm.c shard, as llm.c would.)
//   - Any other file is byte-level text, one token per byte.
//
// Which files a `--data` path names (TokenDataset::Open, LoadTokens): the
// file itself; a folder's regular files, recursively; or, for a path that
// does not exist and holds *, ? or [, the glob(3) matches of the pattern
// (e.g. "fineweb10B/fineweb_train_*.bin"; folders among them expanded).
// The files are taken in sorted path order.
//
// Validation shards (Open only). A file named val.bin, *_val.bin or
// *_val_*.bin is a validation shard, as llm.c and nanoGPT name them:
//   1. When a folder or a pattern takes in validation shards, they are the
//      eval split and the other files the train split.
//   2. Else, when the path is a file or pattern named *.bin whose name has
//      a "train" word (between start, '_', '-' or '.' and '_', '-' or '.'),
//      the same name with the last such word replaced by "val", and what
//      follows "train_" up to ".bin" by anything, names validation shards
//      beside it: data/train.bin brings data/val.bin (nanoGPT), x_train.bin
//      brings x_val.bin and fineweb_train_000001.bin (or fineweb_train_*.bin)
//      brings fineweb_val_*.bin (llm.c). Those that exist are the eval
//      split. A file named on its own is always train data.
//   3. Else the eval split is the last eval_fraction of the tokens (cutting
//      the last file), as for TokenDataset::Create.
// With validation shards, DatasetOptions::eval_fraction is ignored.
//
// Shards are mapped read-only (mmap) and never read whole into memory;
// byte-level text is read and widened to uint16. Every token is checked
// against the vocabulary when a file is opened. A shard truncated in place
// while mapped makes the process fault (SIGBUS), as for any mapped file:
// replace shards by rename.
#ifndef STRATA_DATA_DATASET_H_
#define STRATA_DATA_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strata {

inline constexpr char kShardMagic[8] = {'S', 'T', 'R', 'A', 'T', 'O', 'K', '1'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr int kByteVocab = 256;

// llm.c's shard header (dev/data/data_common.py): 256 int32.
inline constexpr int32_t kLlmcMagic = 20240520;        // GPT-2, uint16
inline constexpr int32_t kLlmcVersion = 1;             // of a GPT-2 shard
inline constexpr int32_t kLlmcLlama3Magic = 20240801;  // uint32, refused
inline constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

// Writes `tokens` as a Strata shard at `path` (replacing it). INTERNAL on
// an I/O error.
absl::Status WriteTokenShard(const std::string& path,
                             absl::Span<const uint16_t> tokens);

// Writes `tokens` as an llm.c GPT-2 shard at `path` (replacing it).
// INVALID_ARGUMENT for more than 2^31 - 1 tokens (the header's int32
// count); INTERNAL on an I/O error.
absl::Status WriteLlmcShard(const std::string& path,
                            absl::Span<const uint16_t> tokens);

// Reads and validates the Strata shard at `path`. NOT_FOUND if it cannot
// be opened; DATA_LOSS on a bad magic, an unknown version, a truncated
// body or trailing bytes; INVALID_ARGUMENT if a token is >= vocab.
absl::StatusOr<std::vector<uint16_t>> ReadTokenShard(const std::string& path,
                                                     int vocab);

// Validates Strata shard `bytes` as ReadTokenShard does (`path` names it
// in errors).
absl::StatusOr<std::vector<uint16_t>> ParseTokenShard(const std::string& bytes,
                                                      const std::string& path,
                                                      int vocab);

// Validates llm.c shard `bytes` (`path` names it in errors): DATA_LOSS
// when it has no llm.c magic, a version other than 1, a short header, or a
// header count that disagrees with its length; FAILED_PRECONDITION for a
// LLaMA-3 shard; INVALID_ARGUMENT if a token is >= vocab.
absl::StatusOr<std::vector<uint16_t>> ParseLlmcShard(const std::string& bytes,
                                                     const std::string& path,
                                                     int vocab);

// The tokens of every file `path` names (see the top of this file; no
// validation-shard rules), concatenated in sorted path order. NOT_FOUND for
// a missing path, a pattern with no match or a folder without files; the
// errors of the formats above, naming the file; INVALID_ARGUMENT when byte
// tokens do not fit (vocab < 256).
absl::StatusOr<std::vector<uint16_t>> LoadTokens(const std::string& path,
                                                 int vocab);

// Which part of a dataset to draw from.
enum class Split { kTrain, kEval };

// How a TokenDataset cuts its tokens into windows.
struct DatasetOptions {
  int context = 64;             // a window is context + 1 tokens
  double eval_fraction = 0.05;  // the last such fraction is the eval split
  int stride = 0;               // between window starts; 0 means context
};

class TokenFile;  // one file's tokens, mapped or owned (token_files.h)

// Tokens in segments (one per shard, per run of consecutive text files, or
// Create's vector), numbered train segments first, then eval segments; the
// train split is the tokens before num_tokens(kTrain), the eval split the
// rest. Each split is cut into windows of context + 1 tokens starting
// every `stride` tokens within each of its segments: a window never crosses
// from one segment into the next (as in llm.c's loader), so a split's
// window count is the sum over its segments. Sample number s of a split is
// window perm(seed, epoch)(s mod W) of epoch s / W, W = num_windows(split),
// where perm is a keyed bijection on [0, W) (a Feistel network with cycle
// walking), so an epoch visits every window once and no permutation array
// is stored. Immutable; thread-safe.
class TokenDataset {
 public:
  // One segment of `tokens`, its last eval_fraction the eval split.
  // INVALID_ARGUMENT if context or stride is negative or zero (after
  // defaulting), eval_fraction is outside [0, 1), or a split has no window
  // (eval_fraction 0 gives an empty eval split).
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Create(
      std::vector<uint16_t> tokens, const DatasetOptions& options);

  // The files `path` names, split into train and eval by the rules at the
  // top of this file; shards stay mapped while the dataset lives. The
  // errors of Create (also when validation shards hold no window), of
  // LoadTokens, and INVALID_ARGUMENT when a folder or pattern holds only
  // validation shards.
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Open(
      const std::string& path, int vocab, const DatasetOptions& options);

  ~TokenDataset();

  // The number of windows in `split` (0 only for an empty eval split).
  int64_t num_windows(Split split) const { return windows_[Index(split)]; }
  int64_t num_tokens(Split split) const;
  int context() const { return options_.context; }

  // How many tokens lie in read-only file mappings (the rest in memory).
  int64_t mapped_tokens() const;

  // The first token of sample `sample` of `split` under `seed`, numbered
  // as above (train segments first).
  // REQUIRES: num_windows(split) > 0, sample >= 0.
  int64_t WindowStart(Split split, uint64_t seed, int64_t sample) const;

  // Writes the context + 1 tokens of sample `sample` to out.
  void Sample(Split split, uint64_t seed, int64_t sample, int32_t* out) const;

  // Samples first_sample .. first_sample + B - 1 as a batch: tokens (B,T)
  // gets the first T tokens of each window and targets (B,T) the last T
  // (the next-token targets), T = context.
  void Batch(Split split, uint64_t seed, int64_t first_sample, int B,
             int32_t* tokens, int32_t* targets) const;

 private:
  // A split's tokens within one segment, and the windows cut from them.
  struct Piece {
    int64_t begin;         // number of its first token in the dataset
    const uint16_t* data;  // that token
    int64_t first_window;  // number of its first window in the split
  };

  TokenDataset(std::vector<TokenFile> files, const DatasetOptions& options);
  static int Index(Split split) { return split == Split::kTrain ? 0 : 1; }

  // Checks `options` and builds a dataset over `files` whose first
  // `train_tokens` tokens (those of the files before the validation
  // shards), or whose first 1 - eval_fraction of the tokens when nullopt,
  // are the train split. INVALID_ARGUMENT as for Create.
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Build(
      std::vector<TokenFile> files, std::optional<int64_t> train_tokens,
      const DatasetOptions& options);
  void CutWindows(Split split, int64_t begin, int64_t end);

  // The piece of `split` holding sample `sample`, and the window's offset
  // into it.
  const Piece& Locate(Split split, uint64_t seed, int64_t sample,
                      int64_t* offset) const;

  std::vector<TokenFile> files_;  // the segments, train ones first
  DatasetOptions options_;
  int64_t total_tokens_ = 0;
  int64_t train_tokens_ = 0;
  std::vector<Piece> pieces_[2];  // by Index(split), in token order
  int64_t windows_[2] = {0, 0};
};

// The keyed bijection on [0, n) that TokenDataset uses, exposed for tests.
// REQUIRES: 0 <= index < n.
int64_t PermuteIndex(int64_t index, int64_t n, uint64_t key);

// Which of a split's n windows (items) its sample `sample` is under `seed`:
// each epoch of n samples is its own permutation of the n. TokenDataset
// reads its windows in this order, and the Python package's ElasticSampler
// hands out a dataset's items in it. REQUIRES: n > 0, sample >= 0.
int64_t ShuffledIndex(int64_t sample, int64_t n, uint64_t seed,
                      Split split = Split::kTrain);

}  // namespace strata

#endif  // STRATA_DATA_DATASET_H_
