// GPT-2's tokenizer (data/gpt2_tokenizer.h) on one thread over English
// text, every file under /usr/share/common-licenses repeated to --mib MiB,
// against a plain read of the same bytes in the same run (the limit of any
// pass over the text; tokenizing is far from it, the ratio shows how far).
// The tokenizer's pre-token cache is warm after the first copy, as it is
// over most of a large corpus.
//
// Usage: tokenizer_bench --vocab_dir DIR [--text_dir D] [--mib 32]
//        [--reps 3] [--detail]
// Prints: tokenizer_MBps X read_MBps Y ratio Z  (one line), and with
// --detail the parts: pre-tokenization by the scanner and by PCRE2, and
// BPE without the cache.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/read_pass.h"
#include "data/gpt2_pretokenizer.h"
#include "data/gpt2_tokenizer.h"

namespace {

// Best MB/s (10^6 bytes) of `reps` runs of `pass` over `bytes`.
template <typename F>
double BestMBps(size_t bytes, int reps, F pass) {
  return strata::bench::BestBytesPerSecond(bytes, reps, pass) / 1e6;
}

// The regular files under `dir`, in path order, concatenated and repeated
// to at least `bytes`.
std::string Text(const std::string& dir, size_t bytes) {
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && !e.is_symlink()) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  std::string once;
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    once += ss.str();
  }
  std::string text;
  while (!once.empty() && text.size() < bytes) text += once;
  return text;
}

// Pre-tokenization alone, by the scanner and by PCRE2; BPE without cache.
void PrintDetail(const strata::Gpt2Tokenizer& tok, const std::string& text,
                 int reps) {
  auto pcre2 = strata::Pcre2Pretokenizer::Create();
  if (!pcre2.ok()) return;
  std::vector<absl::string_view> pieces;
  pieces.reserve(text.size() / 3);
  const double scanner = BestMBps(text.size(), reps, [&] {
    pieces.clear();
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = strata::Gpt2PretokenEnd(text, pos);
      pieces.push_back(absl::string_view(text).substr(pos, end - pos));
      pos = end;
    }
  });
  const double regex = BestMBps(text.size(), reps, [&] {
    pieces.clear();
    (void)(*pcre2)->Split(text, &pieces);
  });
  std::vector<int32_t> ids;
  const double uncached = BestMBps(text.size(), 1, [&] {
    ids.clear();
    for (absl::string_view piece : pieces) tok.EncodePiece(piece, &ids);
  });
  std::printf(
      "pretokenize_scanner_MBps %.1f pretokenize_pcre2_MBps %.1f "
      "scanner_speedup %.2f\n",
      scanner, regex, scanner / regex);
  std::printf("bpe_uncached_MBps %.1f\n", uncached);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("GPT-2 tokenizer against a plain read of the same text");
  std::string vocab_dir;
  std::string text_dir = "/usr/share/common-licenses";
  size_t mib = 32;
  int reps = 3;
  bool detail = false;
  app.add_option("--vocab_dir", vocab_dir,
                 "encoder.json and vocab.bpe (scripts/gpt2-vocab.sh)")
      ->required();
  app.add_option("--text_dir", text_dir, "the text")->capture_default_str();
  app.add_option("--mib", mib, "text size")->capture_default_str();
  app.add_option("--reps", reps, "runs; the best is printed")
      ->capture_default_str();
  app.add_flag("--detail", detail, "also the parts' rates");
  CLI11_PARSE(app, argc, argv);
  auto tok = strata::Gpt2Tokenizer::Load(vocab_dir + "/encoder.json",
                                         vocab_dir + "/vocab.bpe");
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  const std::string text = Text(text_dir, mib << 20);
  if (text.empty()) {
    std::fprintf(stderr, "no text under %s\n", text_dir.c_str());
    return 1;
  }
  std::vector<uint64_t> words((text.size() + 7) / 8);
  std::memcpy(words.data(), text.data(), text.size());
  volatile uint64_t sink = 0;
  const double read = BestMBps(text.size(), reps * 5, [&] {
    sink = sink + strata::bench::XorWords(words.data(),
                                          static_cast<int64_t>(words.size()));
  });
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  const double encode = BestMBps(text.size(), reps, [&] {
    ids.clear();
    (*tok)->Encode(text, &ids);
  });
  std::printf(
      "tokenizer_MBps %.1f read_MBps %.0f ratio %.4f (%zu bytes, "
      "%.2f bytes/token)\n",
      encode, read, encode / read, text.size(),
      static_cast<double>(text.size()) / ids.size());
  if (detail) PrintDetail(**tok, text, reps);
  return 0;
}
