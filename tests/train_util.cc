#include "tests/train_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/process_util.h"

namespace strata::testing {

std::string WriteCorpus(const std::string& dir) {
  const std::string path = dir + "/corpus.txt";
  std::ofstream f(path);
  for (int i = 0; i < 200; ++i)
    f << "the quick brown fox jumps over the lazy dog. ";
  return path;
}

std::vector<std::string> TinyModelFlags(const std::string& corpus) {
  return {"--layers",  "2",     "--heads",  "2",    "--width", "32",
          "--context", "32",    "--data",   corpus, "--seed",  "3",
          "--lr",      "0.003", "--warmup", "2"};
}

BspRun TrainBsp(const std::vector<std::string>& devices,
                const std::string& name, const std::vector<std::string>& flags,
                const std::vector<std::string>& server_flags,
                std::string* status) {
  const int workers = static_cast<int>(devices.size());
  const std::string dir = FreshDir(name);
  const std::string corpus = WriteCorpus(dir);
  TestCluster cluster(STRATA_BINARY, dir, {}, server_flags);
  const std::string address = cluster.address();
  EXPECT_FALSE(address.empty());
  std::vector<std::unique_ptr<Child>> trainers;
  for (int w = 0; w < workers; ++w) {
#ifdef STRATA_VGPU_BINARY
    const char* binary =
        devices[w] == "cuda" ? STRATA_VGPU_BINARY : STRATA_BINARY;
#else
    const char* binary = STRATA_BINARY;
#endif
    std::vector<std::string> args = {
        binary,          "worker",
        "--device",      devices[w],
        "--metrics",     absl::StrCat(dir, "/metrics-", w, ".jsonl"),
        "--scheduler",   address,
        "--workers",     std::to_string(workers),
        "--batch",       "4",
        "--steps",       "6",
        "--eval_every",  "0",
        "--weights_out", dir + "/weights.f32"};
    for (const auto& f : TinyModelFlags(corpus)) args.push_back(f);
    args.insert(args.end(), flags.begin(), flags.end());
    trainers.push_back(
        std::make_unique<Child>(args, absl::StrCat(dir, "/worker", w, ".log")));
  }
  for (auto& t : trainers) EXPECT_EQ(t->Wait(), 0) << t->Output();
  if (status != nullptr) {
    Child st({STRATA_BINARY, "status", "--scheduler", address},
             dir + "/status.log");
    EXPECT_EQ(st.Wait(absl::Seconds(30)), 0) << st.Output();
    *status = st.Output();
  }
  cluster.Stop();
  std::ifstream f(dir + "/weights.f32", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  BspRun run;
  run.weights.resize(bytes.size() / 4);
  std::memcpy(run.weights.data(), bytes.data(), run.weights.size() * 4);
  // Rank 0 is whichever worker joined first; its metrics have every step.
  for (int w = 0; w < workers && run.losses.empty(); ++w) {
    run.losses = Losses(absl::StrCat(dir, "/metrics-", w, ".jsonl"));
  }
  return run;
}

namespace {

// One field of each line of a JSON-lines file.
template <typename T>
std::vector<T> Column(const std::string& path, const char* key) {
  std::vector<T> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    out.push_back(nlohmann::json::parse(line)[key].get<T>());
  }
  return out;
}

}  // namespace

std::vector<double> Losses(const std::string& metrics) {
  return Column<double>(metrics, "loss");
}

std::vector<int64_t> StepsRecorded(const std::string& metrics) {
  return Column<int64_t>(metrics, "step");
}

void ExpectCloseWeights(const BspRun& a, const BspRun& b) {
  ASSERT_FALSE(a.weights.empty());
  ASSERT_EQ(a.weights.size(), b.weights.size());
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    max_diff = std::max(
        max_diff, static_cast<double>(std::fabs(a.weights[i] - b.weights[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(a.weights[i])));
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs)
      << "max |diff| " << max_diff << " of max |w| " << max_abs;
  // And training moved the weights (the comparison is not vacuous).
  EXPECT_GT(max_abs, 0.0);
}

}  // namespace strata::testing
