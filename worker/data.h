// Training data for the worker: byte-level tokens from text, pre-tokenized
// shards, and deterministic sampling of fixed-length windows.
//
// Shard format (little-endian): "STRATOK1", u32 version (1), u64 token
// count, then that many uint16 tokens, and nothing after.
#ifndef STRATA_WORKER_DATA_H_
#define STRATA_WORKER_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strata {

inline constexpr char kShardMagic[8] = {'S', 'T', 'R', 'A', 'T', 'O', 'K', '1'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr int kByteVocab = 256;

// Writes `tokens` as a shard at `path` (replacing it). INTERNAL on an I/O
// error.
absl::Status WriteTokenShard(const std::string& path,
                             absl::Span<const uint16_t> tokens);

// Reads and validates the shard at `path`. NOT_FOUND if it cannot be opened;
// DATA_LOSS on a bad magic, an unknown version, a truncated body or trailing
// bytes; INVALID_ARGUMENT if a token is >= vocab.
absl::StatusOr<std::vector<uint16_t>> ReadTokenShard(const std::string& path,
                                                     int vocab);

// Validates shard `bytes` as ReadTokenShard does (`path` names it in
// errors).
absl::StatusOr<std::vector<uint16_t>> ParseTokenShard(const std::string& bytes,
                                                      const std::string& path,
                                                      int vocab);

// Loads tokens from `path`: a file that starts with the shard magic is read
// as a shard, any other file as bytes (one token per byte); a folder
// contributes all regular files under it, recursively, in sorted path order,
// concatenated. NOT_FOUND for a missing path; errors of ReadTokenShard; and
// INVALID_ARGUMENT when byte tokens do not fit (vocab < 256).
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

// A token sequence split into train (the first tokens) and eval (the last
// eval_fraction) parts, each cut into windows of context + 1 tokens starting
// every `stride` tokens. Sample number s of a split is window
// perm(seed, epoch)(s mod W) of epoch s / W, W = num_windows(split), where
// perm is a keyed bijection on [0, W) (a Feistel network with cycle
// walking), so an epoch visits every window once and no permutation array
// is stored. Immutable; thread-safe.
class TokenDataset {
 public:
  // INVALID_ARGUMENT if context or stride is negative or zero (after
  // defaulting), eval_fraction is outside [0, 1), or a split has fewer than
  // context + 1 tokens (eval_fraction 0 gives an empty eval split).
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Create(
      std::vector<uint16_t> tokens, const DatasetOptions& options);

  // LoadTokens(path, vocab) then Create.
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Open(
      const std::string& path, int vocab, const DatasetOptions& options);

  // The number of windows in `split` (0 only for an empty eval split).
  int64_t num_windows(Split split) const;
  int64_t num_tokens(Split split) const;
  int context() const { return options_.context; }

  // The first token of sample `sample` of `split` under `seed`.
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
  TokenDataset(std::vector<uint16_t> tokens, const DatasetOptions& options,
               int64_t train_tokens);

  std::vector<uint16_t> tokens_;
  DatasetOptions options_;
  int64_t train_tokens_;
};

// The keyed bijection on [0, n) that TokenDataset uses, exposed for tests.
// REQUIRES: 0 <= index < n.
int64_t PermuteIndex(int64_t index, int64_t n, uint64_t key);

}  // namespace strata

#endif  // STRATA_WORKER_DATA_H_
