#include "data/gpt2_pretokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

struct Cut {
  std::string text;
  std::vector<std::string> pieces;  // as Python's regex.findall gives them
};

class Gpt2PretokenizerCuts : public ::testing::TestWithParam<Cut> {};

// The expected pieces are those of Python's `regex` module with GPT-2's
// pattern (regex 2026.5.9).
TEST_P(Gpt2PretokenizerCuts, AsPythonsRegexDoes) {
  const std::vector<absl::string_view> pieces =
      Gpt2Pretokenize(GetParam().text);
  EXPECT_THAT(std::vector<std::string>(pieces.begin(), pieces.end()),
              ElementsAreArray(GetParam().pieces));
  auto pcre2 = Pcre2Pretokenizer::Create();
  ASSERT_TRUE(pcre2.ok()) << pcre2.status();
  std::vector<absl::string_view> reference;
  ASSERT_TRUE((*pcre2)->Split(GetParam().text, &reference).ok());
  EXPECT_EQ(pieces, reference);
}

INSTANTIATE_TEST_SUITE_P(
    Python, Gpt2PretokenizerCuts,
    ::testing::Values(
        Cut{"Hello world", {"Hello", " world"}},
        // Contractions are lower case only: 'S and 'LL are not.
        Cut{"I'll don't 'S 'LL it's",
            {"I", "'ll", " don", "'t", " '", "S", " '", "LL", " it", "'s"}},
        Cut{"'s's''s", {"'s", "'s", "''", "s"}},
        // A run of spaces leaves its last one to the word after it.
        Cut{"a  b", {"a", " ", " b"}}, Cut{"a\n\nb", {"a", "\n", "\n", "b"}},
        Cut{"x   \n  y", {"x", "   \n ", " y"}},
        Cut{"  leading", {" ", " leading"}},
        Cut{"trailing  ", {"trailing", "  "}}, Cut{"\t\tx", {"\t", "\t", "x"}},
        Cut{"x\r\n\r\ny", {"x", "\r\n\r", "\n", "y"}},
        // Only U+0020 joins the word after it.
        Cut{"x \u3000y", {"x", " ", "\u3000", "y"}},
        Cut{"a\u00a0\u00a0b", {"a", "\u00a0", "\u00a0", "b"}},
        Cut{"a\u0085b", {"a", "\u0085", "b"}},
        // U+180E is no longer a space (PCRE2's own \s says it is).
        Cut{"\u180e x", {"\u180e", " x"}},
        Cut{"1234 56.7 \u2177 \u00bd",
            {"1234", " 56", ".", "7", " \u2177", " \u00bd"}},
        Cut{"caf\u00e9 \u4e2d\u6587 \U0001F642 na\u00efve",
            {"caf\u00e9", " \u4e2d\u6587", " \U0001F642", " na\u00efve"}},
        Cut{"e\u0301t", {"e", "\u0301", "t"}},
        Cut{"<|endoftext|>", {"<|", "endoftext", "|>"}},
        Cut{"!!! ...?", {"!!!", " ...?"}}, Cut{"", {}}));

// Random strings of the code points where the alternatives meet: the
// scanner cuts them as PCRE2 runs the regex.
TEST(Gpt2Pretokenizer, AgreesWithPcre2OnRandomText) {
  const std::vector<std::string> alphabet = {
      "a",      "Z",      "\u00e9", "\u4e2d", "\U0001F642", "1",
      "\u0663", "\u00bd", "\u2167", " ",      "  ",         "\n",
      "\t",     "\r",     "\u3000", "\u00a0", "\u0085",     "\u2028",
      "'",      "s",      "t",      "re",     "ll",         "S",
      "!",      "-",      "\u0301", "\u200b", "\ufeff",     "\u180e"};
  auto pcre2 = Pcre2Pretokenizer::Create();
  ASSERT_TRUE(pcre2.ok()) << pcre2.status();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<absl::string_view> reference;
    ASSERT_TRUE((*pcre2)->Split(text, &reference).ok());
    ASSERT_EQ(Gpt2Pretokenize(text), reference) << "text: " << text;
  }
}

// Bytes that are not UTF-8 are pieces of [^\s\p{L}\p{N}], one code point
// each, and every byte is in some piece.
TEST(Gpt2Pretokenizer, TakesInvalidUtf8AsOtherCodePoints) {
  const std::vector<absl::string_view> pieces =
      Gpt2Pretokenize("a\xff\xfe b \x80x\xe4\xb8 \xed\xa0\x80 \xc0\xaf!");
  EXPECT_THAT(pieces, ElementsAre("a", "\xff\xfe", " b", " \x80", "x",
                                  "\xe4\xb8", " \xed\xa0\x80", " \xc0\xaf!"));
  auto pcre2 = Pcre2Pretokenizer::Create();
  ASSERT_TRUE(pcre2.ok()) << pcre2.status();
  std::vector<absl::string_view> reference;
  EXPECT_EQ((*pcre2)->Split("a\xff", &reference).code(),
            absl::StatusCode::kInvalidArgument);
}

// A truncated sequence at the very end is not read past.
TEST(Gpt2Pretokenizer, StopsAtTheEndOfATruncatedSequence) {
  const std::string text = "ab\xf0\x9f\x99";
  EXPECT_THAT(Gpt2Pretokenize(absl::string_view(text)),
              ElementsAre("ab", "\xf0\x9f\x99"));
}

}  // namespace
}  // namespace strata
