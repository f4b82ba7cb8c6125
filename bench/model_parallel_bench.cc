// Tensor and pipeline parallelism inside a worker on CPU threads: the step
// time (forward + backward) of ParallelGpt split tp x pp with m micro-
// batches, against the unsplit Gpt on the same batch in the same run (their
// steps interleaved; medians).
// Prints, per split, `ratio_to_unsplit <tp:pp:m> <x>` (unsplit step time /
// split step time: 1 is as fast as the whole model) and the pipeline's
// ideal bubble (p-1)/(m+p-1). All ranks' kernels share the process's one
// thread pool, so on one machine the ratio measures the split's overhead
// (shards, all-reduces, the bubble), not a speed-up.
//   model_parallel_bench --splits 2:1:1,1:2:4
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/parallel.h"
#include "model/gpt.h"
#include "model/gpt_parallel.h"

namespace {

using strata::Model;

void Step(Model& m, const std::vector<int32_t>& tokens, int B, int T) {
  auto loss = m.ForwardBackward(tokens.data(), tokens.data() + 1, B, T);
  if (!loss.ok()) {
    std::fprintf(stderr, "%s\n", loss.status().ToString().c_str());
    std::exit(1);
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median step seconds of `a` and of `b`, their steps interleaved (a, b, a,
// b, ...) so that a drift in the machine's speed affects both alike.
std::pair<double, double> StepSeconds(Model& a, Model& b,
                                      const std::vector<int32_t>& tokens, int B,
                                      int T, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) {
    Step(a, tokens, B, T);
    Step(b, tokens, B, T);
  }
  std::vector<double> ta, tb;
  for (int i = 0; i < steps; ++i) {
    absl::Time t0 = absl::Now();
    Step(a, tokens, B, T);
    ta.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
    t0 = absl::Now();
    Step(b, tokens, B, T);
    tb.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
  }
  return {Median(ta), Median(tb)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Tensor/pipeline-parallel GPT step time against unsplit");
  strata::GptConfig c;
  c.layers = 4;
  c.width = 256;
  c.heads = 4;
  c.context = 256;
  c.vocab = 256;
  int batch = 8, warmup = 1, steps = 3;
  std::string splits = "2:1:1,4:1:1,1:2:1,1:2:8,1:4:8,2:2:8";
  app.add_option("--layers", c.layers);
  app.add_option("--width", c.width);
  app.add_option("--heads", c.heads);
  app.add_option("--context", c.context);
  app.add_option("--vocab", c.vocab);
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--splits", splits, "tp:pp:micro_batches,...");
  CLI11_PARSE(app, argc, argv);

  const int T = c.context;
  std::mt19937 rng(1);
  std::vector<int32_t> tokens(static_cast<size_t>(batch) * T + 1);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % c.vocab);
  auto whole = strata::Gpt::Create(c);
  if (!whole.ok()) {
    std::fprintf(stderr, "%s\n", whole.status().ToString().c_str());
    return 2;
  }
  (*whole)->InitParams(1);
  std::printf("# L%d C%d H%d V%d B%d T%d, %d kernel threads\n", c.layers,
              c.width, c.heads, c.vocab, batch, T, strata::NumThreads());
  for (absl::string_view spec : absl::StrSplit(splits, ',')) {
    std::vector<std::string> parts = absl::StrSplit(spec, ':');
    strata::ModelParallelism par;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &par.tp) ||
        !absl::SimpleAtoi(parts[1], &par.pp) ||
        !absl::SimpleAtoi(parts[2], &par.micro_batches)) {
      std::fprintf(stderr, "bad split '%s' (want tp:pp:m)\n",
                   std::string(spec).c_str());
      return 2;
    }
    auto split = strata::ParallelGpt::Create(c, par);
    if (!split.ok()) {
      std::fprintf(stderr, "%s\n", split.status().ToString().c_str());
      return 2;
    }
    (*split)->InitParams(1);
    const auto [unsplit, s] =
        StepSeconds(**whole, **split, tokens, batch, T, warmup, steps);
    const int m = std::min(par.micro_batches, batch);
    std::printf(
        "split %s step_s %.4f unsplit_step_s %.4f ideal_bubble %.3f "
        "ratio_to_unsplit %s %.3f\n",
        std::string(spec).c_str(), s, unsplit,
        static_cast<double>(par.pp - 1) / (m + par.pp - 1),
        std::string(spec).c_str(), unsplit / s);
  }
  return 0;
}
