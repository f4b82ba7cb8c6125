// Token shards (worker/data.h, written by `strata data`): any bytes give a
// Status or tokens that are all below the vocabulary.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "worker/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  constexpr int kVocab = 50257;
  auto tokens = strata::ParseTokenShard(bytes, "fuzz", kVocab);
  if (!tokens.ok()) return 0;
  for (uint16_t t : *tokens) {
    if (t >= kVocab) std::abort();
  }
  return 0;
}
