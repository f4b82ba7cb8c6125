// CRC-32C (storage/crc32c.h), which every spilled tile and every snapshot
// record is checked with, written and read: on one thread over a tile-sized
// buffer, against a plain read of the same buffer (the limit: the CRC reads
// every byte once) and against the same code on pieces just below the
// three-stream block (one stream at a time, as before 2026-11-26) in the
// same run.
//
// Usage: crc32c_bench [--mib 12] [--reps R]
// Prints: read_GBps, crc32c_GBps, crc32c_ratio_to_read,
//         one_stream_GBps, crc32c_speedup_over_one_stream.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"
#include "bench/read_pass.h"
#include "storage/crc32c.h"

namespace {

// Best GB/s of `reps` runs of `pass` over `bytes`.
template <typename F>
double BestGBps(size_t bytes, int reps, F pass) {
  return strata::bench::BestBytesPerSecond(bytes, reps, pass) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("CRC-32C against a plain read of the same buffer");
  size_t mib = 12;
  int reps = 20;
  app.add_option("--mib", mib, "buffer size (a 4 MiB chunk's Adam tile: 12)")
      ->capture_default_str();
  app.add_option("--reps", reps, "runs; the best is printed")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const size_t bytes = (mib << 20) / 8 * 8;
  // Words, so the plain read needs no cast; the CRC reads them as bytes.
  std::vector<uint64_t> words(bytes / 8);
  for (size_t i = 0; i < words.size(); ++i) words[i] = i * 0x9e3779b97f4a7c15u;
  const absl::string_view data(reinterpret_cast<const char*>(words.data()),
                               bytes);
  volatile uint64_t sink = 0;
  const double read = BestGBps(bytes, reps, [&] {
    sink = sink + strata::bench::XorWords(words.data(),
                                          static_cast<int64_t>(words.size()));
  });
  const double crc =
      BestGBps(bytes, reps, [&] { sink = sink + strata::crc32c::Value(data); });
  // Pieces below 3 x 4096 bytes take the one-stream path.
  constexpr size_t kPiece = 3 * 4096 - 8;
  const double one = BestGBps(bytes, reps, [&] {
    uint32_t c = 0;
    for (size_t at = 0; at < bytes; at += kPiece) {
      c = strata::crc32c::Extend(c,
                                 data.substr(at, std::min(kPiece, bytes - at)));
    }
    sink = sink + c;
  });
  std::printf("read_GBps %.2f\ncrc32c_GBps %.2f\ncrc32c_ratio_to_read %.3f\n",
              read, crc, crc / read);
  std::printf("one_stream_GBps %.2f\ncrc32c_speedup_over_one_stream %.2f\n",
              one, crc / one);
  return 0;
}
