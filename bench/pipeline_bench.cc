// Pipeline bubble: RunPipelineStep (1F1B) over the in-process group, each
// stage's forward taking --forward_ms and its backward twice that (sleeps,
// so the 2 cores of the build machine do not serialize the stages). Prints
// the measured bubble fraction, 1 - (busy time of a stage) / (step time),
// against the schedule's ideal (p-1)/(m+p-1), for each stages:micro_batches.
//   pipeline_bench --configs 2:4,4:8
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collective/inproc_communicator.h"
#include "model_parallel/pipeline.h"

namespace {

constexpr size_t kBoundary = 4096;

double StepSeconds(int stages, int micro_batches, absl::Duration forward) {
  auto comms = *strata::MakeInProcGroup(stages);
  strata::StageFunctions fns;
  fns.forward =
      [forward](int, std::vector<float>) -> absl::StatusOr<std::vector<float>> {
    absl::SleepFor(forward);
    return std::vector<float>(kBoundary);
  };
  fns.backward =
      [forward](int, std::vector<float>) -> absl::StatusOr<std::vector<float>> {
    absl::SleepFor(2 * forward);
    return std::vector<float>(kBoundary);
  };
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (auto& comm : comms) {
    threads.emplace_back([&, c = comm.get()] {
      absl::Status s =
          strata::RunPipelineStep(*c, micro_batches, kBoundary, fns);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        std::exit(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  return absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Pipeline bubble of the 1F1B executor");
  std::string configs = "2:1,2:4,2:8,4:4,4:8,4:16";
  double forward_ms = 20;
  app.add_option("--configs", configs, "stages:micro_batches,...");
  app.add_option("--forward_ms", forward_ms)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const absl::Duration forward = absl::Milliseconds(forward_ms);
  for (absl::string_view config : absl::StrSplit(configs, ',')) {
    std::vector<std::string> parts = absl::StrSplit(config, ':');
    int p = 0, m = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &p) ||
        !absl::SimpleAtoi(parts[1], &m) || p < 1 || m < 1) {
      std::fprintf(stderr, "bad config %s\n", std::string(config).c_str());
      return 2;
    }
    const double step = StepSeconds(p, m, forward);
    const double busy = m * 3 * absl::ToDoubleSeconds(forward);
    const double bubble = 1 - busy / step;
    const double ideal = double(p - 1) / double(m + p - 1);
    std::printf(
        "pipeline_bubble stages%d_micro%d %.3f ideal %.3f step_s %.3f\n", p, m,
        bubble, ideal, step);
  }
  return 0;
}
