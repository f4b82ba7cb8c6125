// Training progress for people and for tools: a status line on a terminal
// (rewritten in place), plain log lines otherwise, and a JSON-lines metrics
// file.
#ifndef STRATA_TRAINER_PROGRESS_H_
#define STRATA_TRAINER_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata {

// One step's figures.
struct StepMetrics {
  int64_t step = 0;  // 0-based step just finished
  int64_t total_steps = 0;
  double loss = 0;  // this worker's training loss
  std::optional<double> eval_loss;
  double tokens_per_s = 0;  // this worker's throughput, smoothed
  double lr = 0;
  double grad_norm = 0;  // before clipping
  std::optional<double>
      mfu;  // model FLOPs utilization, where the peak is known (GPUs)
  // With MoE layers: the load-balancing loss (summed over the layers),
  // the fraction of assignments dropped over capacity, and each layer's
  // tokens per expert.
  std::optional<double> moe_aux_loss;
  double moe_dropped = 0;
  std::vector<std::vector<int>> moe_load;
  // With sparse experts (TrainerOptions::sparse_experts): the fraction of
  // the experts' bytes this worker pulled and pushed with a payload in the
  // step (1: as many as a dense sync of every expert).
  std::optional<double> moe_experts_pulled, moe_experts_pushed;
  // Under --consistency auto: the mode the step ran in ("" otherwise).
  std::string consistency;
  absl::Duration elapsed;
};

// Not thread-safe; one per worker.
class Progress {
 public:
  // `out` is where lines go (stderr in the CLI; nullptr: no display, e.g.
  // on workers other than rank 0); `tty` picks the in-place status line.
  // `metrics_path` "" writes no metrics file.
  static absl::StatusOr<std::unique_ptr<Progress>> Create(
      std::FILE* out, bool tty, int64_t log_every,
      const std::string& metrics_path);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress();

  // Records a step: the metrics line always; a display line on a terminal
  // every step, otherwise every log_every steps and on eval steps.
  void Step(const StepMetrics& m);
  // Ends the in-place line, if any.
  void Finish();

  static std::string FormatDuration(
      absl::Duration d);  // "1h02m", "3m05s", "12s"

 private:
  Progress() = default;
  std::FILE* out_ = nullptr;
  bool tty_ = false;
  int64_t log_every_ = 1;
  std::FILE* metrics_ = nullptr;
  bool line_open_ = false;
};

}  // namespace strata

#endif  // STRATA_TRAINER_PROGRESS_H_
