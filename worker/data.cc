#include "worker/data.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr size_t kHeaderBytes = sizeof(kShardMagic) + 4 + 8;

uint64_t Mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  if (in.bad())
    return absl::InternalError(absl::StrCat("error reading ", path));
  return bytes;
}

template <typename T>
T LoadLE(const char* p) {  // x86 and our shards are little-endian
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool IsShard(const std::string& bytes) {
  return bytes.size() >= sizeof(kShardMagic) &&
         std::memcmp(bytes.data(), kShardMagic, sizeof(kShardMagic)) == 0;
}

// Appends the tokens of one file (shard or bytes) to `out`.
absl::Status AppendFile(const std::string& path, int vocab,
                        std::vector<uint16_t>& out) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  if (IsShard(*bytes)) {
    absl::StatusOr<std::vector<uint16_t>> t =
        ParseTokenShard(*bytes, path, vocab);
    if (!t.ok()) return t.status();
    out.insert(out.end(), t->begin(), t->end());
    return absl::OkStatus();
  }
  if (vocab < kByteVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is read as bytes, which needs vocab >= 256, not ", vocab));
  }
  for (unsigned char c : *bytes) out.push_back(c);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<uint16_t>> ParseTokenShard(const std::string& bytes,
                                                      const std::string& path,
                                                      int vocab) {
  if (!IsShard(bytes)) {
    return absl::DataLossError(absl::StrCat(path, ": not a token shard"));
  }
  if (bytes.size() < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path, ": truncated header"));
  }
  const uint32_t version = LoadLE<uint32_t>(bytes.data() + 8);
  if (version != kShardVersion) {
    return absl::DataLossError(
        absl::StrCat(path, ": unknown shard version ", version));
  }
  const uint64_t count = LoadLE<uint64_t>(bytes.data() + 12);
  const uint64_t body = bytes.size() - kHeaderBytes;
  if (count > body / 2 || body != count * 2) {
    return absl::DataLossError(absl::StrCat(path, ": header says ", count,
                                            " tokens but the body has ", body,
                                            " bytes"));
  }
  std::vector<uint16_t> tokens(count);
  // An empty shard's vector has no storage: memcpy must not see its null.
  if (body > 0) std::memcpy(tokens.data(), bytes.data() + kHeaderBytes, body);
  for (uint64_t i = 0; i < count; ++i) {
    if (tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": token ", tokens[i], " at ", i, " is >= vocab ", vocab));
    }
  }
  return tokens;
}

absl::Status WriteTokenShard(const std::string& path,
                             absl::Span<const uint16_t> tokens) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint32_t version = kShardVersion;
  const uint64_t count = tokens.size();
  out.write(kShardMagic, sizeof(kShardMagic));
  out.write(reinterpret_cast<const char*>(&version), sizeof(version));
  out.write(reinterpret_cast<const char*>(&count), sizeof(count));
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint16_t>> ReadTokenShard(const std::string& path,
                                                     int vocab) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return ParseTokenShard(*bytes, path, vocab);
}

absl::StatusOr<std::vector<uint16_t>> LoadTokens(const std::string& path,
                                                 int vocab) {
  std::error_code ec;
  std::vector<uint16_t> tokens;
  if (!fs::is_directory(path, ec)) {
    if (absl::Status s = AppendFile(path, vocab, tokens); !s.ok()) return s;
    return tokens;
  }
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) files.push_back(it->path().string());
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("listing ", path, ": ", ec.message()));
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    if (absl::Status s = AppendFile(f, vocab, tokens); !s.ok()) return s;
  }
  return tokens;
}

int64_t PermuteIndex(int64_t index, int64_t n, uint64_t key) {
  // A balanced Feistel network on 2*half bits (>= log2 n) is a bijection of
  // [0, 4^half); walking the cycle until the value is below n restricts it
  // to a bijection of [0, n). The domain is < 4n, so walks are short.
  int half = 1;
  while ((int64_t{1} << (2 * half)) < n) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t x = static_cast<uint64_t>(index);
  do {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = Mix64(right ^ Mix64(key + round)) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

TokenDataset::TokenDataset(std::vector<uint16_t> tokens,
                           const DatasetOptions& options, int64_t train_tokens)
    : tokens_(std::move(tokens)),
      options_(options),
      train_tokens_(train_tokens) {}

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Create(
    std::vector<uint16_t> tokens, const DatasetOptions& options) {
  DatasetOptions o = options;
  if (o.stride == 0) o.stride = o.context;
  if (o.context < 1 || o.stride < 1) {
    return absl::InvalidArgumentError("context and stride must be positive");
  }
  if (!(o.eval_fraction >= 0 && o.eval_fraction < 1)) {
    return absl::InvalidArgumentError("eval_fraction must be in [0, 1)");
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t eval = static_cast<int64_t>(n * o.eval_fraction);
  const int64_t window = int64_t{o.context} + 1;
  if (n - eval < window || (o.eval_fraction > 0 && eval < window)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset of ", n, " tokens is too small for windows of ", window,
        " tokens in both splits (eval fraction ", o.eval_fraction, ")"));
  }
  return std::unique_ptr<TokenDataset>(
      new TokenDataset(std::move(tokens), o, n - eval));
}

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(
    const std::string& path, int vocab, const DatasetOptions& options) {
  absl::StatusOr<std::vector<uint16_t>> tokens = LoadTokens(path, vocab);
  if (!tokens.ok()) return tokens.status();
  return Create(std::move(*tokens), options);
}

int64_t TokenDataset::num_tokens(Split split) const {
  return split == Split::kTrain
             ? train_tokens_
             : static_cast<int64_t>(tokens_.size()) - train_tokens_;
}

int64_t TokenDataset::num_windows(Split split) const {
  const int64_t n = num_tokens(split) - (options_.context + 1);
  return n < 0 ? 0 : n / options_.stride + 1;
}

int64_t TokenDataset::WindowStart(Split split, uint64_t seed,
                                  int64_t sample) const {
  const int64_t windows = num_windows(split);
  const uint64_t epoch = static_cast<uint64_t>(sample / windows);
  const uint64_t key =
      Mix64(seed ^ Mix64(epoch * 2 + (split == Split::kEval ? 1 : 0)));
  const int64_t w = PermuteIndex(sample % windows, windows, key);
  return (split == Split::kTrain ? 0 : train_tokens_) + w * options_.stride;
}

void TokenDataset::Sample(Split split, uint64_t seed, int64_t sample,
                          int32_t* out) const {
  const int64_t start = WindowStart(split, seed, sample);
  std::copy(tokens_.begin() + start,
            tokens_.begin() + start + options_.context + 1, out);
}

void TokenDataset::Batch(Split split, uint64_t seed, int64_t first_sample,
                         int B, int32_t* tokens, int32_t* targets) const {
  const int T = options_.context;
  for (int b = 0; b < B; ++b) {
    const int64_t start = WindowStart(split, seed, first_sample + b);
    const uint16_t* w = tokens_.data() + start;
    std::copy(w, w + T, tokens + int64_t{b} * T);
    std::copy(w + 1, w + T + 1, targets + int64_t{b} * T);
  }
}

}  // namespace strata
