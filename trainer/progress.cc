#include "trainer/progress.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace strata {

absl::StatusOr<std::unique_ptr<Progress>> Progress::Create(
    std::FILE* out, bool tty, int64_t log_every,
    const std::string& metrics_path) {
  std::unique_ptr<Progress> owner(new Progress());
  Progress& p = *owner;
  p.out_ = out;
  p.tty_ = tty;
  p.log_every_ = log_every > 0 ? log_every : 1;
  if (!metrics_path.empty()) {
    p.metrics_ = std::fopen(metrics_path.c_str(), "a");
    if (p.metrics_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot open metrics file ", metrics_path, ": ",
                       std::strerror(errno)));
    }
  }
  return owner;
}

Progress::~Progress() {
  Finish();
  if (metrics_ != nullptr) std::fclose(metrics_);
}

std::string Progress::FormatDuration(absl::Duration d) {
  int64_t s = absl::ToInt64Seconds(d);
  if (s < 0) s = 0;
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

void Progress::Step(const StepMetrics& m) {
  if (metrics_ != nullptr) {
    nlohmann::json j = {{"step", m.step},
                        {"loss", m.loss},
                        {"tokens_per_s", m.tokens_per_s},
                        {"lr", m.lr},
                        {"grad_norm", m.grad_norm},
                        {"elapsed_s", absl::ToDoubleSeconds(m.elapsed)}};
    if (m.eval_loss) j["eval_loss"] = *m.eval_loss;
    if (m.mfu) j["mfu"] = *m.mfu;
    if (m.moe_aux_loss) {
      j["moe_aux_loss"] = *m.moe_aux_loss;
      j["moe_dropped"] = m.moe_dropped;
      j["moe_load"] = m.moe_load;
    }
    if (m.moe_experts_pulled) {
      j["moe_experts_pulled"] = *m.moe_experts_pulled;
      j["moe_experts_pushed"] = m.moe_experts_pushed.value_or(0);
    }
    if (!m.consistency.empty()) j["consistency"] = m.consistency;
    std::fprintf(metrics_, "%s\n", j.dump().c_str());
    std::fflush(metrics_);
  }
  if (out_ == nullptr) return;
  const int64_t done = m.step + 1;
  const absl::Duration eta = done > 0
                                 ? m.elapsed / static_cast<double>(done) *
                                       static_cast<double>(m.total_steps - done)
                                 : absl::ZeroDuration();
  std::string line = absl::StrFormat(
      "step %d/%d  loss %.4f  %.0f tok/s  lr %.2e  ETA %s", done, m.total_steps,
      m.loss, m.tokens_per_s, m.lr, FormatDuration(eta));
  if (m.mfu) absl::StrAppendFormat(&line, "  MFU %.1f%%", 100 * *m.mfu);
  if (m.moe_aux_loss) {
    absl::StrAppendFormat(&line, "  aux %.4f  dropped %.1f%%", *m.moe_aux_loss,
                          100 * m.moe_dropped);
  }
  if (m.moe_experts_pulled) {
    absl::StrAppendFormat(&line, "  experts pulled %.0f%% pushed %.0f%%",
                          100 * *m.moe_experts_pulled,
                          100 * m.moe_experts_pushed.value_or(0));
  }
  if (!m.consistency.empty()) absl::StrAppend(&line, "  ", m.consistency);
  if (m.eval_loss)
    absl::StrAppendFormat(&line, "  eval_loss %.4f", *m.eval_loss);
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    line_open_ = true;
    if (m.eval_loss) {  // keep eval results on screen
      std::fprintf(out_, "\n");
      line_open_ = false;
    }
  } else if (done % log_every_ == 0 || m.eval_loss || done == m.total_steps ||
             m.step == 0) {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void Progress::Finish() {
  if (line_open_ && out_ != nullptr) std::fprintf(out_, "\n");
  line_open_ = false;
}

}  // namespace strata
