// Helpers of the GPT training tests (train_test.cc, train_sync_test.cc):
// a tiny corpus and model, and BSP runs through a real cluster.
#ifndef STRATA_TESTS_TRAIN_UTIL_H_
#define STRATA_TESTS_TRAIN_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace strata::testing {

// A short text with structure a tiny model can pick up quickly, written
// to `dir`/corpus.txt; returns its path.
std::string WriteCorpus(const std::string& dir);

// `strata worker` flags for a tiny GPT on `corpus`.
std::vector<std::string> TinyModelFlags(const std::string& corpus);

struct BspRun {
  std::vector<float> weights;  // rank 0's, after the last step
  std::vector<double> losses;  // rank 0's, per step
};

// Trains 6 steps with one worker process per entry of `devices` ("cpu",
// or "cuda" on the virtual GPU binary), each with `flags`, through a
// TestCluster with `server_flags`. With `status`, `strata status` at the
// end goes there.
BspRun TrainBsp(const std::vector<std::string>& devices,
                const std::string& name,
                const std::vector<std::string>& flags = {"--grad_clip", "0"},
                const std::vector<std::string>& server_flags = {},
                std::string* status = nullptr);

// The losses of a worker's metrics file (JSON lines), in step order.
std::vector<double> Losses(const std::string& metrics);
// The "step" of each line of a worker's metrics file.
std::vector<int64_t> StepsRecorded(const std::string& metrics);

// Two runs' final weights agree up to float rounding: the largest
// difference is below 1e-4 of the largest weight (AdamW's normalized step
// can amplify rounding in the gradient sums a little over 6 steps).
void ExpectCloseWeights(const BspRun& a, const BspRun& b);

}  // namespace strata::testing

#endif  // STRATA_TESTS_TRAIN_UTIL_H_
