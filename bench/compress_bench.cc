// Compressed pushes (common/compress.h, client/error_feedback.h) as a
// worker makes them: the bytes a step of GPT-2 124M's gradients takes on
// the wire per method against fp32, and the time the encoding with its
// error feedback takes, against the bf16 conversion with error feedback
// (the conversion a GPU worker's pushes get today) in the same run.
//
// The model: 124,439,808 parameters in 4 MiB chunks (what a worker
// pushes), gradients drawn from a normal distribution (the encodings'
// sizes do not depend on the values; their speed barely). One thread,
// best of --reps passes over all chunks.
//
// Prints, per method (bf16, onebit, topk:0.01, topk:0.001):
//   <method>_bytes_per_step, <method>_ratio_to_fp32,
//   <method>_encode_GBps (fp32 gradient bytes in per second),
//   <method>_encode_ratio_to_bf16.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/best_seconds.h"
#include "client/error_feedback.h"
#include "common/compress.h"

namespace strata {
namespace {

constexpr size_t kParams = 124439808, kChunk = size_t{1} << 20;

using strata::bench::BestSeconds;

int Run(int reps) {
  const size_t chunks = (kParams + kChunk - 1) / kChunk;
  std::vector<float> g(kChunk);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1e-3f);
  for (float& x : g) x = d(rng);
  auto numel = [&](size_t c) { return std::min(kChunk, kParams - c * kChunk); };
  const double fp32 = 4.0 * kParams;
  std::printf("fp32_bytes_per_step %.0f\n", fp32);
  // bf16 with error feedback: the reference.
  Bf16ErrorFeedback bf16;
  std::vector<uint16_t> half(kChunk);
  const double bf16_s = BestSeconds(reps, [&] {
    for (size_t c = 0; c < chunks; ++c) {
      bf16.Encode(static_cast<int>(c), g.data(), half.data(),
                  static_cast<int64_t>(numel(c)));
    }
  });
  auto report = [&](const char* name, double bytes, double seconds) {
    std::printf("%s_bytes_per_step %.0f\n", name, bytes);
    std::printf("%s_ratio_to_fp32 %.5f\n", name, bytes / fp32);
    std::printf("%s_encode_GBps %.3f\n", name, fp32 / seconds / 1e9);
    std::printf("%s_encode_ratio_to_bf16 %.3f\n", name, bf16_s / seconds);
  };
  report("bf16", 2.0 * kParams, bf16_s);
  struct Method {
    const char* name;
    v1::DType dtype;
    double ratio;
  };
  for (const Method& m : {Method{"onebit", v1::DTYPE_ONEBIT, 0},
                          Method{"topk_0.01", v1::DTYPE_TOPK, 0.01},
                          Method{"topk_0.001", v1::DTYPE_TOPK, 0.001}}) {
    CompressedErrorFeedback ef(m.dtype, m.ratio);
    std::string out;
    double bytes = 0;
    const double s = BestSeconds(reps, [&] {
      bytes = 0;
      for (size_t c = 0; c < chunks; ++c) {
        ef.Encode(static_cast<int>(c), g.data(), static_cast<int64_t>(numel(c)),
                  &out);
        bytes += static_cast<double>(out.size());
      }
    });
    report(m.name, bytes, s);
  }
  std::fprintf(stderr,
               "# %zu parameters in %zu chunks, one thread, best of %d\n",
               kParams, chunks, reps);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  }
  return strata::Run(reps);
}
