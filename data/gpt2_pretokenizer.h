// GPT-2's pre-tokenization: the text cut into the pieces that GPT-2's regex
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// finds, one after the other, as Python's `regex` module applies it to a
// str (OpenAI's encoder.py). Byte-pair merges then run inside each piece.
//
// Two implementations of the same cut:
// - Gpt2PretokenEnd, a hand-written scanner over ICU's character classes:
//   the one the tokenizer uses. It cuts 3.5x as fast as PCRE2's JIT over
//   English text (490 against 140 MB/s) and 2x over text of mixed scripts
//   (bench/tokenizer.sh --detail prints both), which is the difference
//   between a tokenizer at 260 and at about 110 MB/s; and, unlike PCRE2, it
//   takes invalid UTF-8 (see below).
// - Pcre2Pretokenizer: the regex itself, compiled by PCRE2 with its JIT; the
//   reference that tests compare the scanner with.
//
// Known differences from Python's `regex`:
// - \s is Unicode's White_Space property in both (U+0009-000D, U+0020,
//   U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F,
//   U+3000), which both implementations here spell out: PCRE2's own \s
//   (with UCP) would add U+180E, and JavaScript's \s (the npm package
//   gpt-3-encoder) lacks U+0085 and adds U+FEFF.
// - \p{L} and \p{N} come from the Unicode version of the library: ICU 72
//   (Unicode 15) here, PCRE2 10.42 (Unicode 14), `regex` its own. They
//   differ only on code points assigned in between.
// - Invalid UTF-8 (a stray continuation byte, a truncated or overlong
//   sequence, a surrogate, anything above U+10FFFF): GPT-2 takes Python
//   str, so it has no such input. The scanner takes each byte that does not
//   start a valid sequence as one code point of the class
//   [^\s\p{L}\p{N}], as Python's surrogateescape would (it maps such a byte
//   to a lone surrogate, category Cs), and the byte goes into the merges as
//   it is: nothing is lost and Decode(Encode(text)) == text for any bytes.
#ifndef STRATA_DATA_GPT2_PRETOKENIZER_H_
#define STRATA_DATA_GPT2_PRETOKENIZER_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

// The end (a byte offset) of the piece of `text` that starts at byte `pos`.
// Any bytes are accepted (see above). Thread-safe.
// REQUIRES: pos < text.size().
size_t Gpt2PretokenEnd(absl::string_view text, size_t pos);

// All the pieces of `text`, in order, as views into it; they cover it.
std::vector<absl::string_view> Gpt2Pretokenize(absl::string_view text);

// GPT-2's regex compiled by PCRE2 (UTF, JIT), \s spelled out as above.
// Immutable after Create; Split may be called from several threads (each
// call makes its own match data).
class Pcre2Pretokenizer {
 public:
  // INTERNAL if PCRE2 cannot compile the pattern.
  static absl::StatusOr<std::unique_ptr<Pcre2Pretokenizer>> Create();
  ~Pcre2Pretokenizer();

  // Appends the pieces of `text` to `out`. INVALID_ARGUMENT if `text` is not
  // valid UTF-8 (the scanner's way with such bytes is its own).
  absl::Status Split(absl::string_view text,
                     std::vector<absl::string_view>* out) const;

 private:
  explicit Pcre2Pretokenizer(void* code) : code_(code) {}
  void* code_;  // pcre2_code_8*, owned; void* keeps pcre2.h out of here
};

}  // namespace strata

#endif  // STRATA_DATA_GPT2_PRETOKENIZER_H_
