#include "data/gpt2_pretokenizer.h"

#include <unicode/uchar.h>

#include <cstdint>
#include <string>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

// The four classes of code point that GPT-2's regex tells apart.
enum Cls : uint8_t { kOther, kLetter, kNumber, kSpace };

// \s is White_Space, as in Python's `regex`; \p{L} and \p{N} the general
// categories L* and N*.
Cls IcuClass(UChar32 c) {
  if (u_isUWhiteSpace(c)) return kSpace;
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    default:
      return kOther;
  }
}

// The class of every code point of the Basic Multilingual Plane, built once
// (64 KiB): a table lookup is several times cheaper than ICU's calls, and
// nearly all text is in the BMP. Surrogates are never looked up.
const Cls* BmpClasses() {
  static const Cls* const table = [] {
    Cls* t = new Cls[0x10000];
    for (UChar32 c = 0; c < 0x10000; ++c) t[c] = IcuClass(c);
    return t;
  }();
  return table;
}

// One code point of the text: its class and its length in bytes.
struct CodePoint {
  Cls cls;
  uint8_t len;
};

// The code point at s[i], a byte >= 0x80 (see the header on invalid bytes).
CodePoint DecodeMultibyte(const unsigned char* s, size_t n, size_t i,
                          const Cls* bmp) {
  const uint32_t b0 = s[i];
  auto cont = [&](size_t k) { return i + k < n && (s[i + k] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF && cont(1)) {
    return {bmp[((b0 & 0x1F) << 6) | (s[i + 1] & 0x3F)], 2};
  }
  if (b0 >= 0xE0 && b0 <= 0xEF && cont(1) && cont(2)) {
    const uint32_t c =
        ((b0 & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    if (c >= 0x800 && (c < 0xD800 || c > 0xDFFF)) return {bmp[c], 3};
  }
  if (b0 >= 0xF0 && b0 <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const uint32_t c = ((b0 & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) |
                       ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
    if (c >= 0x10000 && c <= 0x10FFFF) {
      return {IcuClass(static_cast<UChar32>(c)), 4};
    }
  }
  return {kOther, 1};
}

inline CodePoint Decode(const unsigned char* s, size_t n, size_t i,
                        const Cls* bmp) {
  if (s[i] < 0x80) return {bmp[s[i]], 1};
  return DecodeMultibyte(s, n, i, bmp);
}

// The end of the run of code points of class `cls` that starts at i.
size_t RunEnd(const unsigned char* s, size_t n, size_t i, Cls cls,
              const Cls* bmp) {
  while (i < n) {
    if (s[i] < 0x80) {
      if (bmp[s[i]] != cls) break;
      ++i;
      continue;
    }
    const CodePoint c = DecodeMultibyte(s, n, i, bmp);
    if (c.cls != cls) break;
    i += c.len;
  }
  return i;
}

// The end of a contraction ('s 't 're 've 'm 'll 'd, lower case only) at
// s[i] == '\'', or i when there is none.
size_t ContractionEnd(const unsigned char* s, size_t n, size_t i) {
  if (i + 1 >= n) return i;
  const unsigned char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 >= n) return i;
  const unsigned char b = s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
      (a == 'l' && b == 'l')) {
    return i + 3;
  }
  return i;
}

// \s+(?!\S)|\s+ at i, a space: the whole run of spaces when it ends the text
// or is one code point; otherwise all of it but its last code point, which
// then starts the next piece (as ' ?\p{L}+' and the like, or alone).
size_t SpaceRunEnd(const unsigned char* s, size_t n, size_t i, const Cls* bmp) {
  size_t last = i;
  size_t end = i;
  while (end < n) {
    const CodePoint c = Decode(s, n, end, bmp);
    if (c.cls != kSpace) break;
    last = end;
    end += c.len;
  }
  if (end == n || last == i) return end;
  return last;
}

}  // namespace

// The alternatives of the regex in its order; the first that matches wins.
size_t Gpt2PretokenEnd(absl::string_view text, size_t pos) {
  const Cls* bmp = BmpClasses();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  if (s[pos] == '\'') {
    const size_t end = ContractionEnd(s, n, pos);
    if (end != pos) return end;
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' with the space.
  if (s[pos] == ' ' && pos + 1 < n) {
    const CodePoint next = Decode(s, n, pos + 1, bmp);
    if (next.cls != kSpace) return RunEnd(s, n, pos + 1, next.cls, bmp);
  }
  const CodePoint c = Decode(s, n, pos, bmp);
  if (c.cls != kSpace) return RunEnd(s, n, pos, c.cls, bmp);
  return SpaceRunEnd(s, n, pos, bmp);
}

std::vector<absl::string_view> Gpt2Pretokenize(absl::string_view text) {
  std::vector<absl::string_view> pieces;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = Gpt2PretokenEnd(text, pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

namespace {

// Python's \s (White_Space) inside a character class, for PCRE2.
#define STRATA_WS                                                     \
  "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}" \
  "\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

constexpr char kPattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" STRATA_WS
    "\\p{L}\\p{N}]+|[" STRATA_WS "]+(?![^" STRATA_WS "])|[" STRATA_WS "]+";

#undef STRATA_WS

pcre2_code* Code(void* code) { return static_cast<pcre2_code*>(code); }

}  // namespace

absl::StatusOr<std::unique_ptr<Pcre2Pretokenizer>> Pcre2Pretokenizer::Create() {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern),
                                   PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InternalError(
        absl::StrCat("PCRE2 cannot compile GPT-2's pattern at offset ", offset,
                     ": ", reinterpret_cast<const char*>(message)));
  }
  // Without a JIT (an unsupported CPU), PCRE2 interprets: slower, the same.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Pcre2Pretokenizer>(new Pcre2Pretokenizer(code));
}

Pcre2Pretokenizer::~Pcre2Pretokenizer() { pcre2_code_free(Code(code_)); }

absl::Status Pcre2Pretokenizer::Split(
    absl::string_view text, std::vector<absl::string_view>* out) const {
  pcre2_match_data* match =
      pcre2_match_data_create_from_pattern(Code(code_), nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  absl::Status status;
  uint32_t options = 0;  // the first match checks the whole text's UTF-8
  for (size_t pos = 0; pos < text.size() && status.ok();) {
    const int rc = pcre2_match(Code(code_), subject, text.size(), pos, options,
                               match, nullptr);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
      status = absl::InvalidArgumentError("text is not valid UTF-8");
    } else if (rc < 0 || ovector[0] != pos || ovector[1] <= pos) {
      // Every code point starts a match of one of the alternatives.
      status = absl::InternalError(
          absl::StrCat("PCRE2 found no piece at byte ", pos, " (", rc, ")"));
    } else {
      out->push_back(text.substr(pos, ovector[1] - pos));
      pos = ovector[1];
    }
    options = PCRE2_NO_UTF_CHECK;
  }
  pcre2_match_data_free(match);
  return status;
}

}  // namespace strata
