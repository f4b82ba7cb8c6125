// GPT-2's byte-level BPE tokenizer: the same ids as OpenAI's encoder.py
// (and as its `encode_ordinary`: the text "<|endoftext|>" is ordinary text,
// never id 50256), from GPT-2's own encoder.json and vocab.bpe.
//
// Encoding cuts the text into GPT-2's pre-tokens (data/gpt2_pretokenizer.h),
// maps each pre-token's bytes to GPT-2's printable stand-ins (its
// bytes_to_unicode), and merges adjacent symbols, lowest-ranked merge first
// (a merge's rank is its line in vocab.bpe), into the encoder's tokens.
//
//   auto tok = Gpt2Tokenizer::Load("encoder.json", "vocab.bpe");
//   std::vector<int32_t> ids;
//   (*tok)->Encode("Hello world", &ids);  // {15496, 995}
#ifndef STRATA_DATA_GPT2_TOKENIZER_H_
#define STRATA_DATA_GPT2_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace strata {

// A loaded GPT-2 vocabulary and its merges. Immutable after Load, so one
// tokenizer serves any number of threads at once: Encode keeps its cache of
// pre-token -> ids per thread (see Encode), Decode reads only.
class Gpt2Tokenizer {
 public:
  // GPT-2's end-of-text token, which separates documents.
  static constexpr int32_t kEndOfText = 50256;

  // Reads GPT-2's `encoder_json` (token -> id) and `merges_bpe` (vocab.bpe:
  // a "#version" line, then one merge "A B" a line, in rank order).
  // NOT_FOUND if a file cannot be read; INVALID_ARGUMENT, naming the file
  // and the line or key, for malformed JSON, an id that is negative,
  // >= 65536 (shards hold uint16) or given to two tokens, ids that are not
  // 0..N-1, a token that is not made of GPT-2's byte stand-ins, no
  // "<|endoftext|>" at kEndOfText, a merge line that is not two symbols, a
  // merge given twice, or a merge whose symbols or result are not tokens.
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Load(
      const std::string& encoder_json, const std::string& merges_bpe);

  // Appends the ids of `text` to `out`. Any bytes are accepted: invalid
  // UTF-8 is encoded byte by byte (data/gpt2_pretokenizer.h) so that
  // Decode gives `text` back. Never produces kEndOfText: callers add it
  // between documents. Thread-safe and lock-free: each thread caches the
  // ids of the pre-tokens it has seen with this tokenizer (up to 2^19 of
  // them and about 48 MiB, kept until the thread ends; emptied when full
  // or when the thread encodes with another tokenizer).
  void Encode(absl::string_view text, std::vector<int32_t>* out) const;

  // The bytes of `ids` (kEndOfText gives "<|endoftext|>", as in GPT-2),
  // as they are: ids cut inside a character give invalid UTF-8, where
  // encoder.py's decode would put U+FFFD.
  // INVALID_ARGUMENT, naming the position, for an id outside
  // [0, vocab_size()).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

  // The number of tokens: 50257 for GPT-2.
  int vocab_size() const { return static_cast<int>(tokens_.size()); }

  // The BPE of one pre-token, without the cache (exposed for tests and the
  // benchmark). Appends its ids to `out`. REQUIRES: piece.size() < 2^31.
  void EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const;

 private:
  // What merging the pair (left, right) gives, and how early it comes.
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  Gpt2Tokenizer() = default;

  // Reads vocab.bpe's `text` (from `path`) into merges_, given the
  // encoder's token -> id.
  absl::Status ParseMerges(
      const std::string& path, absl::string_view text,
      const absl::flat_hash_map<std::string, int32_t>& ids);

  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  }

  std::vector<std::string> tokens_;    // id -> its bytes
  std::array<int32_t, 256> byte_ids_;  // byte -> the id of that one byte
  absl::flat_hash_map<uint64_t, Merge> merges_;  // PairKey -> merge
  uint64_t serial_ = 0;  // tells this tokenizer's cache entries apart
};

}  // namespace strata

#endif  // STRATA_DATA_GPT2_TOKENIZER_H_
