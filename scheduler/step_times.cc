#include "scheduler/step_times.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

constexpr double kMaxSeconds = 86400;
constexpr uint64_t kMaxSamples = uint64_t{1} << 40;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool GoodSeconds(double s) {
  return std::isfinite(s) && s >= 0 && s <= kMaxSeconds;
}

}  // namespace

absl::Status StepTimes::Validate(
    const google::protobuf::RepeatedPtrField<v1::StepTiming>& steps) {
  if (steps.size() > kMaxPerHeartbeat) {
    return absl::InvalidArgumentError(absl::StrCat("heartbeat: ", steps.size(),
                                                   " step timings, at most ",
                                                   kMaxPerHeartbeat));
  }
  for (const v1::StepTiming& t : steps) {
    if (t.step() < 0 || t.samples() == 0 || t.samples() > kMaxSamples ||
        !GoodSeconds(t.compute_s()) || !GoodSeconds(t.wait_s()) ||
        (t.has_idle_s() && !GoodSeconds(t.idle_s()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "heartbeat: step timing {step ", t.step(), ", samples ", t.samples(),
          ", compute_s ", t.compute_s(), ", wait_s ", t.wait_s(),
          t.has_idle_s() ? absl::StrCat(", idle_s ", t.idle_s()) : "",
          "} needs step >= 0, 1 to 2^40 samples and seconds in [0, ",
          kMaxSeconds, "]"));
    }
  }
  return absl::OkStatus();
}

void StepTimes::Add(
    const google::protobuf::RepeatedPtrField<v1::StepTiming>& steps) {
  for (const v1::StepTiming& t : steps) {
    auto same = std::find_if(
        window_.begin(), window_.end(),
        [&t](const v1::StepTiming& w) { return w.step() == t.step(); });
    if (same != window_.end()) window_.erase(same);
    window_.push_back(t);
    while (window_.size() > static_cast<size_t>(kWindow)) window_.pop_front();
  }
}

v1::StepTimes StepTimes::Summary() const {
  v1::StepTimes s;
  if (window_.empty()) return s;
  std::vector<double> compute, per_sample;
  double computing = 0, waiting = 0, idle = 0;
  for (const v1::StepTiming& t : window_) {
    compute.push_back(t.compute_s());
    per_sample.push_back(t.compute_s() / static_cast<double>(t.samples()));
    computing += t.compute_s();
    waiting += t.wait_s();
    // Not measured: the whole wait, as if nothing else used the processors.
    idle += t.has_idle_s() ? std::min(t.idle_s(), t.wait_s()) : t.wait_s();
  }
  double mean = 0;
  for (double x : per_sample) mean += x;
  mean /= per_sample.size();
  double var = 0;
  for (double x : per_sample) var += (x - mean) * (x - mean);
  var /= per_sample.size();
  s.set_steps(static_cast<uint32_t>(window_.size()));
  s.set_compute_s(Median(compute));
  s.set_compute_s_per_sample(Median(per_sample));
  s.set_jitter(mean > 0 ? std::sqrt(var) / mean : 0);
  const double total = computing + waiting;
  s.set_wait_fraction(total > 0 ? waiting / total : 0);
  s.set_idle_fraction(total > 0 ? idle / total : 0);
  return s;
}

}  // namespace strata
