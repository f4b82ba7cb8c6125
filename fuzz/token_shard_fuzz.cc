// Token files (data/dataset.h): Strata shards (written by `strata data`),
// llm.c's shards and nanoGPT's headerless .bin files. Any bytes give a
// Status or tokens that are all below the vocabulary, and a layout that
// lies exactly within the file.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/token_files.h"

namespace {

constexpr int kVocab = 50257;

void CheckTokens(const absl::StatusOr<std::vector<uint16_t>>& tokens) {
  if (!tokens.ok()) return;
  for (uint16_t t : *tokens) {
    if (t >= kVocab) std::abort();
  }
}

// As TokenFile::Open parses a file: from its first bytes and its size.
void CheckLayout(const std::string& bytes, const std::string& name) {
  const std::string head = bytes.substr(0, strata::kLlmcHeaderBytes);
  auto layout = strata::ParseTokenLayout(head, bytes.size(), name);
  if (!layout.ok()) return;
  const uint64_t width = layout->format == strata::TokenFormat::kBytes ? 1 : 2;
  if (layout->offset + layout->count * width != bytes.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  CheckTokens(strata::ParseTokenShard(bytes, "fuzz", kVocab));
  CheckTokens(strata::ParseLlmcShard(bytes, "fuzz", kVocab));
  CheckLayout(bytes, "fuzz.bin");  // no magic: nanoGPT's uint16 tokens
  CheckLayout(bytes, "fuzz.txt");  // no magic: bytes
  return 0;
}
