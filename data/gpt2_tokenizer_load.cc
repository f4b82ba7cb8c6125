// Gpt2Tokenizer::Load: GPT-2's encoder.json and vocab.bpe, checked.
#include <atomic>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/gpt2_tokenizer.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

constexpr char kEndOfTextToken[] = "<|endoftext|>";
constexpr int64_t kMaxId = 65535;  // shards hold uint16 tokens

// GPT-2's bytes_to_unicode(): byte b stands as code point ByteStandIns()[b]
// in encoder.json and vocab.bpe, a printable character: the printable
// bytes stand for themselves, the others (controls, space, ...) for
// U+0100 onwards, in byte order.
std::array<uint32_t, 256> ByteStandIns() {
  std::array<uint32_t, 256> cp{};
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                           (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : 256 + n++;
  }
  return cp;
}

// The bytes that a token of encoder.json stands for, or false when it holds
// anything but GPT-2's stand-ins.
bool TokenBytes(const std::string& token, std::string* bytes) {
  static const auto* const byte_of = [] {
    auto* m = new std::array<int16_t, 324>;
    m->fill(-1);
    const auto cp = ByteStandIns();
    for (int b = 0; b < 256; ++b) (*m)[cp[b]] = static_cast<int16_t>(b);
    return m;
  }();
  for (size_t i = 0; i < token.size();) {
    const auto b0 = static_cast<unsigned char>(token[i]);
    uint32_t c = b0;
    size_t len = 1;
    if (b0 >= 0x80) {  // the stand-ins are below U+0180: two bytes at most
      const auto b1 =
          i + 1 < token.size() ? static_cast<unsigned char>(token[i + 1]) : 0;
      if (b0 < 0xC2 || b0 > 0xC5 || (b1 & 0xC0) != 0x80) return false;
      c = ((b0 & 0x1F) << 6) | (b1 & 0x3F);
      len = 2;
    }
    if (c >= byte_of->size() || (*byte_of)[c] < 0) return false;
    bytes->push_back(static_cast<char>((*byte_of)[c]));
    i += len;
  }
  return true;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat(path, ": read error"));
  return ss.str();
}

absl::Status Bad(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// encoder.json as token (GPT-2's stand-in form) -> id; checks the ids.
absl::StatusOr<absl::flat_hash_map<std::string, int32_t>> ParseEncoder(
    const std::string& path, const std::string& text) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number such as 1e500.
    return Bad(path, absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!json.is_object()) return Bad(path, "not a JSON object of token -> id");
  absl::flat_hash_map<std::string, int32_t> ids;
  absl::flat_hash_map<int32_t, std::string> tokens;
  for (const auto& [token, value] : json.items()) {
    const std::string key = nlohmann::json(token).dump();
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > kMaxId) {
      return Bad(path, absl::StrCat("token ", key, ": id ", value.dump(),
                                    " is not an integer in [0, 65535]"));
    }
    const auto id = value.get<int32_t>();
    if (const auto [it, fresh] = tokens.emplace(id, key); !fresh) {
      return Bad(path, absl::StrCat("id ", id, " is given to both ", it->second,
                                    " and ", key));
    }
    ids.emplace(token, id);
  }
  return ids;
}

// The id -> bytes table of encoder.json's `ids`: dense, with kEndOfTextToken
// at Gpt2Tokenizer::kEndOfText.
absl::StatusOr<std::vector<std::string>> TokenTable(
    const std::string& path,
    const absl::flat_hash_map<std::string, int32_t>& ids) {
  std::vector<std::string> tokens(ids.size());
  for (const auto& [token, id] : ids) {
    if (static_cast<size_t>(id) >= ids.size()) {
      return Bad(path, absl::StrCat("ids are not 0..", ids.size() - 1, ": ",
                                    nlohmann::json(token).dump(), " has ", id));
    }
    if (!TokenBytes(token, &tokens[id])) {
      return Bad(path, absl::StrCat("token ", nlohmann::json(token).dump(),
                                    " is not made of GPT-2's byte stand-ins"));
    }
  }
  const auto eot = ids.find(kEndOfTextToken);
  if (eot == ids.end() || eot->second != Gpt2Tokenizer::kEndOfText) {
    return Bad(path, absl::StrCat("no \"", kEndOfTextToken, "\" with id ",
                                  Gpt2Tokenizer::kEndOfText));
  }
  return tokens;
}

// The id of `symbol` in the encoder, or an error naming the merge's line.
absl::StatusOr<int32_t> SymbolId(
    const std::string& path, int line, absl::string_view symbol,
    const absl::flat_hash_map<std::string, int32_t>& ids) {
  const auto it = ids.find(symbol);
  if (it == ids.end()) {
    return Bad(path, absl::StrCat("line ", line, ": \"", symbol,
                                  "\" is not a token of the encoder"));
  }
  return it->second;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::Load(
    const std::string& encoder_json, const std::string& merges_bpe) {
  static std::atomic<uint64_t> next_serial{1};
  std::unique_ptr<Gpt2Tokenizer> tok(new Gpt2Tokenizer);
  tok->serial_ = next_serial.fetch_add(1);
  absl::StatusOr<std::string> text = ReadWholeFile(encoder_json);
  if (!text.ok()) return text.status();
  auto ids = ParseEncoder(encoder_json, *text);
  if (!ids.ok()) return ids.status();
  auto tokens = TokenTable(encoder_json, *ids);
  if (!tokens.ok()) return tokens.status();
  tok->tokens_ = *std::move(tokens);
  const auto cp = ByteStandIns();
  for (int b = 0; b < 256; ++b) {
    char utf8[3] = {static_cast<char>(cp[b]), 0, 0};
    if (cp[b] >= 0x80) {
      utf8[0] = static_cast<char>(0xC0 | (cp[b] >> 6));
      utf8[1] = static_cast<char>(0x80 | (cp[b] & 0x3F));
    }
    auto id = SymbolId(encoder_json, 0, utf8, *ids);
    if (!id.ok())
      return Bad(encoder_json, absl::StrCat("no token for byte ", b));
    tok->byte_ids_[b] = *id;
  }
  text = ReadWholeFile(merges_bpe);
  if (!text.ok()) return text.status();
  absl::Status merges = tok->ParseMerges(merges_bpe, *text, *ids);
  if (!merges.ok()) return merges;
  return tok;
}

absl::Status Gpt2Tokenizer::ParseMerges(
    const std::string& path, absl::string_view text,
    const absl::flat_hash_map<std::string, int32_t>& ids) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  absl::flat_hash_map<uint64_t, int> line_of;  // for the duplicate's error
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line = static_cast<int>(i) + 1;
    if (i == 0 && absl::StartsWith(lines[i], "#version")) continue;
    const std::vector<absl::string_view> pair =
        absl::StrSplit(lines[i], absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (pair.size() != 2) {
      return Bad(path,
                 absl::StrCat("line ", line, ": a merge is two symbols, \"",
                              lines[i], "\" is not"));
    }
    auto left = SymbolId(path, line, pair[0], ids);
    if (!left.ok()) return left.status();
    auto right = SymbolId(path, line, pair[1], ids);
    if (!right.ok()) return right.status();
    auto result = SymbolId(path, line, absl::StrCat(pair[0], pair[1]), ids);
    if (!result.ok()) return result.status();
    const uint64_t key = PairKey(*left, *right);
    if (const auto [it, fresh] = line_of.emplace(key, line); !fresh) {
      return Bad(path, absl::StrCat("line ", line, ": the merge of line ",
                                    it->second, " again"));
    }
    merges_.emplace(key, Merge{static_cast<int32_t>(merges_.size()), *result});
  }
  return absl::OkStatus();
}

}  // namespace strata
