// Token file formats: their headers, writers, and one file's tokens read
// through a read-only mapping (TokenFile).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "data/token_files.h"

namespace strata {

// The formats are little-endian and read in place.
static_assert(std::endian::native == std::endian::little);

namespace {

constexpr uint64_t kShardHeaderBytes = sizeof(kShardMagic) + 4 + 8;

template <typename T>
T LoadLE(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool IsStrataShard(absl::string_view head) {
  return absl::StartsWith(head,
                          absl::string_view(kShardMagic, sizeof(kShardMagic)));
}

// The int32 an llm.c shard starts with, or 0.
int32_t LlmcMagic(absl::string_view head) {
  if (head.size() < 4) return 0;
  const int32_t magic = LoadLE<int32_t>(head.data());
  return magic == kLlmcMagic || magic == kLlmcLlama3Magic ? magic : 0;
}

// DATA_LOSS unless `body` bytes hold exactly `count` uint16 tokens.
absl::Status CheckCount(uint64_t count, uint64_t body, const std::string& path,
                        absl::string_view format) {
  if (count <= body / 2 && body == count * 2) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(path, ": the ", format, " header's token count is ", count,
                   " (", count * 2, " bytes), but the file has ", body,
                   " bytes after its header (truncated, or trailing bytes)"));
}

absl::StatusOr<TokenLayout> ParseStrataLayout(absl::string_view head,
                                              uint64_t size,
                                              const std::string& path) {
  if (size < kShardHeaderBytes || head.size() < kShardHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated STRATOK1 header (", size, " of ",
                     kShardHeaderBytes, " bytes)"));
  }
  const uint32_t version = LoadLE<uint32_t>(head.data() + 8);
  if (version != kShardVersion) {
    return absl::DataLossError(absl::StrCat(
        path, ": unknown STRATOK1 shard version ", version, " (want 1)"));
  }
  const uint64_t count = LoadLE<uint64_t>(head.data() + 12);
  absl::Status s =
      CheckCount(count, size - kShardHeaderBytes, path, "STRATOK1");
  if (!s.ok()) return s;
  return TokenLayout{TokenFormat::kStrata, kShardHeaderBytes, count};
}

absl::StatusOr<TokenLayout> ParseLlmcLayout(absl::string_view head,
                                            uint64_t size,
                                            const std::string& path) {
  const int32_t magic = LoadLE<int32_t>(head.data());
  if (size < kLlmcHeaderBytes || head.size() < 3 * sizeof(int32_t)) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated llm.c header (magic ", magic, ", ",
                     size, " of ", kLlmcHeaderBytes, " bytes)"));
  }
  const int32_t version = LoadLE<int32_t>(head.data() + 4);
  if (magic == kLlmcLlama3Magic) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": an llm.c LLaMA-3 shard (magic ", magic, ", version ", version,
        ", uint32 tokens); only llm.c's GPT-2 shards of uint16 "
        "tokens (magic ",
        kLlmcMagic, ", version ", kLlmcVersion, ") are read"));
  }
  if (version != kLlmcVersion) {
    return absl::DataLossError(
        absl::StrCat(path, ": unknown llm.c shard version ", version,
                     " (magic ", magic, "; want version ", kLlmcVersion, ")"));
  }
  const int32_t count = LoadLE<int32_t>(head.data() + 8);
  if (count < 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": negative llm.c header token count ", count));
  }
  absl::Status s = CheckCount(static_cast<uint64_t>(count),
                              size - kLlmcHeaderBytes, path, "llm.c");
  if (!s.ok()) return s;
  return TokenLayout{TokenFormat::kLlmc, kLlmcHeaderBytes,
                     static_cast<uint64_t>(count)};
}

// Writes `size` bytes from `data` after `header`; INTERNAL on an error.
absl::Status WriteFile(const std::string& path, absl::string_view header,
                       const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

// The tokens of shard `bytes`, checked. REQUIRES: it starts with a magic.
absl::StatusOr<std::vector<uint16_t>> ParseShard(const std::string& bytes,
                                                 const std::string& path,
                                                 int vocab) {
  absl::StatusOr<TokenLayout> layout =
      ParseTokenLayout(bytes, bytes.size(), path);
  if (!layout.ok()) return layout.status();
  std::vector<uint16_t> tokens(layout->count);
  // An empty shard's vector has no storage: memcpy must not see its null.
  if (!tokens.empty()) {
    std::memcpy(tokens.data(), bytes.data() + layout->offset,
                tokens.size() * sizeof(uint16_t));
  }
  absl::Status s = CheckVocab(tokens, vocab, path);
  if (!s.ok()) return s;
  return tokens;
}

}  // namespace

absl::StatusOr<TokenLayout> ParseTokenLayout(absl::string_view head,
                                             uint64_t size,
                                             const std::string& path) {
  if (IsStrataShard(head)) return ParseStrataLayout(head, size, path);
  if (LlmcMagic(head) != 0) return ParseLlmcLayout(head, size, path);
  if (absl::EndsWith(path, ".bin")) {
    if (size % 2 != 0) {
      return absl::DataLossError(absl::StrCat(
          path, ": a headerless .bin file (nanoGPT's uint16 tokens) has ", size,
          " bytes, an odd length"));
    }
    return TokenLayout{TokenFormat::kRaw, 0, size / 2};
  }
  return TokenLayout{TokenFormat::kBytes, 0, size};
}

absl::Status CheckVocab(absl::Span<const uint16_t> tokens, int vocab,
                        const std::string& path, uint64_t first_index) {
  if (vocab > std::numeric_limits<uint16_t>::max()) return absl::OkStatus();
  // The maximum first (a loop the compiler vectorizes), the position only
  // on a failure.
  uint16_t max = 0;
  for (uint16_t t : tokens) max = std::max(max, t);
  if (tokens.empty() || max < vocab) return absl::OkStatus();
  const auto bad = std::find_if(tokens.begin(), tokens.end(),
                                [vocab](uint16_t t) { return t >= vocab; });
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": token ", *bad, " at position ",
                   first_index + static_cast<uint64_t>(bad - tokens.begin()),
                   " is >= vocab ", vocab,
                   vocab < 50257 && *bad < 50257
                       ? " (GPT-2 tokens, as llm.c's and nanoGPT's shards "
                         "hold, need --vocab 50257)"
                       : ""));
}

absl::Status WriteTokenShard(const std::string& path,
                             absl::Span<const uint16_t> tokens) {
  char header[kShardHeaderBytes];
  const uint32_t version = kShardVersion;
  const uint64_t count = tokens.size();
  std::memcpy(header, kShardMagic, sizeof(kShardMagic));
  std::memcpy(header + 8, &version, sizeof(version));
  std::memcpy(header + 12, &count, sizeof(count));
  return WriteFile(path, absl::string_view(header, sizeof(header)),
                   tokens.data(), tokens.size() * sizeof(uint16_t));
}

absl::Status WriteLlmcShard(const std::string& path,
                            absl::Span<const uint16_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", tokens.size(),
                     " tokens do not fit an llm.c header's int32 count"));
  }
  int32_t header[kLlmcHeaderBytes / sizeof(int32_t)] = {};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  return WriteFile(
      path,
      absl::string_view(reinterpret_cast<const char*>(header), sizeof(header)),
      tokens.data(), tokens.size() * sizeof(uint16_t));
}

absl::StatusOr<std::vector<uint16_t>> ParseTokenShard(const std::string& bytes,
                                                      const std::string& path,
                                                      int vocab) {
  if (!IsStrataShard(bytes)) {
    return absl::DataLossError(absl::StrCat(path, ": not a token shard"));
  }
  return ParseShard(bytes, path, vocab);
}

absl::StatusOr<std::vector<uint16_t>> ParseLlmcShard(const std::string& bytes,
                                                     const std::string& path,
                                                     int vocab) {
  if (LlmcMagic(bytes) == 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": not an llm.c shard (no magic ", kLlmcMagic, ")"));
  }
  return ParseShard(bytes, path, vocab);
}

absl::StatusOr<std::vector<uint16_t>> ReadTokenShard(const std::string& path,
                                                     int vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  if (in.bad())
    return absl::InternalError(absl::StrCat("error reading ", path));
  return ParseTokenShard(bytes, path, vocab);
}

}  // namespace strata
