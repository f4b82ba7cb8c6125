// Gpt2Tokenizer on small vocabularies of GPT-2's shape, written by the
// test: the merge order of encoder.py, long pre-tokens, threads, and the
// errors of bad files. These need no downloaded files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "data/gpt2_tokenizer.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// GPT-2's bytes_to_unicode() in UTF-8: what byte b stands as.
std::string StandIn(int b) {
  int n = 0;
  for (int c = 0; c < b; ++c) {
    n += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
  }
  const bool printable =
      (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  const int cp = printable ? b : 256 + n;
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)),
          static_cast<char>(0x80 | (cp & 0x3F))};
}

// A directory of the test's own.
std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info->name();  // Suite/Name for parameterized ones
  std::replace(test.begin(), test.end(), '/', '_');
  const std::string name =
      absl::StrCat(::testing::TempDir(), "/gpt2_", getpid(), "_", test);
  std::filesystem::create_directories(name);
  return name;
}

// encoder.json of GPT-2's shape: ids 0..255 the bytes, then `extra`, then
// fillers up to 50255 and "<|endoftext|>" at 50256.
std::string EncoderJson(const std::vector<std::string>& extra) {
  nlohmann::json json = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) json[StandIn(b)] = b;
  int id = 256;
  for (const std::string& token : extra) json[token] = id++;
  while (id < Gpt2Tokenizer::kEndOfText) {
    json[absl::StrCat("#", id)] = id;
    ++id;
  }
  json["<|endoftext|>"] = id;
  return json.dump();
}

struct Files {
  std::string encoder;
  std::string merges;
};

Files Write(const std::string& encoder_json, const std::string& merges_bpe) {
  const std::string dir = TestDir();
  Files files{dir + "/encoder.json", dir + "/vocab.bpe"};
  std::ofstream(files.encoder) << encoder_json;
  std::ofstream(files.merges) << merges_bpe;
  return files;
}

// A tokenizer whose merges are, in rank order: a a, aa aa, b c, a b, h e,
// l l, he ll, hell o, Ġ w.
std::unique_ptr<Gpt2Tokenizer> Small() {
  const Files f =
      Write(EncoderJson({"aa", "aaaa", "bc", "ab", "he", "ll", "hell", "hello",
                         "\u0120w"}),
            "#version: 0.2\na a\naa aa\nb c\na b\nh e\nl l\nhe ll\nhell o\n"
            "\u0120 w\n");
  auto tok = Gpt2Tokenizer::Load(f.encoder, f.merges);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

std::vector<int32_t> Encode(const Gpt2Tokenizer& tok, absl::string_view text) {
  std::vector<int32_t> ids;
  tok.Encode(text, &ids);
  return ids;
}

constexpr int32_t kAaaa = 257, kBc = 258, kHello = 263, kSpaceW = 264;

// encoder.py merges the lowest-ranked pair everywhere, left to right, then
// looks again: not the leftmost pair first.
TEST(Gpt2TokenizerMerges, FollowEncoderPysOrder) {
  const auto tok = Small();
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(Encode(*tok, "aaaaa"), ElementsAre(kAaaa, 'a'));
  EXPECT_THAT(Encode(*tok, "abc"), ElementsAre('a', kBc));
  EXPECT_THAT(Encode(*tok, "hello world"),
              ElementsAre(kHello, kSpaceW, 'o', 'r', 'l', 'd'));
  EXPECT_THAT(Encode(*tok, ""), ElementsAre());
}

// A pre-token of 200,000 letters costs O(n log n): encoder.py's loop would
// take minutes.
TEST(Gpt2TokenizerMerges, AreFastOnAVeryLongPretoken) {
  const auto tok = Small();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = Encode(*tok, std::string(200001, 'a'));
  ASSERT_EQ(ids.size(), 50001u);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kAaaa), 50000);
  EXPECT_EQ(ids.back(), 'a');
}

TEST(Gpt2TokenizerMerges, GiveTheSameIdsOnSeveralThreads) {
  const auto tok = Small();
  ASSERT_NE(tok, nullptr);
  std::string text;
  for (int i = 0; i < 2000; ++i) absl::StrAppend(&text, "hello w", i, " aab ");
  const std::vector<int32_t> want = Encode(*tok, text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (auto& ids : got) {
    threads.emplace_back([&] {
      for (int r = 0; r < 3; ++r) {
        ids.clear();
        tok->Encode(text, &ids);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& ids : got) EXPECT_EQ(ids, want);
}

TEST(Gpt2TokenizerDecode, RefusesAnIdOutsideTheVocabulary) {
  const auto tok = Small();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 50257);
  for (int32_t bad : {-1, 50257}) {
    auto text = tok->Decode({'a', bad});
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(text.status().message(),
                HasSubstr(absl::StrCat("id ", bad, " at position 1")));
  }
}

struct BadFiles {
  std::string name;
  std::string encoder_json;  // "" for EncoderJson({"aa"})
  std::string merges_bpe;
  std::string says;  // part of the error
};

class Gpt2TokenizerLoad : public ::testing::TestWithParam<BadFiles> {};

TEST_P(Gpt2TokenizerLoad, RefusesBadFilesNamingTheFault) {
  const BadFiles& p = GetParam();
  const Files f =
      Write(p.encoder_json.empty() ? EncoderJson({"aa"}) : p.encoder_json,
            p.merges_bpe);
  auto tok = Gpt2Tokenizer::Load(f.encoder, f.merges);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tok.status().message(), HasSubstr(p.says));
  const bool in_merges = p.encoder_json.empty();
  EXPECT_THAT(tok.status().message(),
              HasSubstr(in_merges ? f.merges : f.encoder));
}

INSTANTIATE_TEST_SUITE_P(
    Files, Gpt2TokenizerLoad,
    ::testing::Values(
        BadFiles{"Truncated", "{\"a\": 1,", "", "not valid JSON"},
        BadFiles{"HugeNumber", "{\"a\": 1e500}", "", "not valid JSON"},
        BadFiles{"Garbage", "{\n\"a\": 1\n}}", "", "line 3"},
        BadFiles{"Array", "[1, 2]", "", "not a JSON object"},
        BadFiles{"BigId", "{\"a\": 70000}", "",
                 "token \"a\": id 70000 is not an integer in [0, 65535]"},
        BadFiles{"NegativeId", "{\"a\": -1}", "", "id -1"},
        BadFiles{"TextId", "{\"a\": \"1\"}", "", "id \"1\""},
        BadFiles{"SharedId", "{\"a\": 0, \"b\": 0}", "",
                 "id 0 is given to both \"a\" and \"b\""},
        BadFiles{"Gap", "{\"a\": 0, \"b\": 2}", "", "ids are not 0..1"},
        BadFiles{"RawSpace", "{\" \": 0}", "",
                 "token \" \" is not made of GPT-2's byte stand-ins"},
        BadFiles{"NoEndOfText", "{\"a\": 0}", "", "no \"<|endoftext|>\""},
        BadFiles{"ThreeSymbols", "", "#version: 0.2\na a\na a a\n",
                 "line 3: a merge is two symbols"},
        BadFiles{"OneSymbol", "", "#version: 0.2\naa\n",
                 "line 2: a merge is two symbols"},
        BadFiles{"ResultNotAToken", "", "#version: 0.2\na a\nx y\n",
                 "line 3: \"xy\" is not a token"},
        BadFiles{"SymbolNotAToken", "", "#version: 0.2\nzz a\n",
                 "line 2: \"zz\" is not a token"},
        BadFiles{"Twice", "", "#version: 0.2\na a\na a\n",
                 "line 3: the merge of line 2 again"}),
    [](const ::testing::TestParamInfo<BadFiles>& info) {
      return info.param.name;
    });

TEST(Gpt2TokenizerLoad, SaysWhichFileIsMissing) {
  const Files f = Write(EncoderJson({}), "#version: 0.2\n");
  EXPECT_TRUE(Gpt2Tokenizer::Load(f.encoder, f.merges).ok());
  for (const auto& [encoder, merges] :
       {std::pair<std::string, std::string>{"/nonexistent/e.json", f.merges},
        {f.encoder, "/nonexistent/vocab.bpe"}}) {
    auto tok = Gpt2Tokenizer::Load(encoder, merges);
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(tok.status().message(), HasSubstr("/nonexistent/"));
  }
}

}  // namespace
}  // namespace strata
