#include "cluster/lease_ahead.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

namespace strata {

LeaseAhead::LeaseAhead(absl::Duration cover) : cover_(cover) {}

bool LeaseAhead::Valid(const Held& h, const v1::View& view,
                       uint64_t member) const {
  if (h.member != member || h.generation != view.generation()) return false;
  const bool bsp = h.lease.workers() > 0;
  return !bsp || h.lease.epoch() == view.workers_epoch();
}

std::optional<v1::LeaseWorkResponse> LeaseAhead::Take(int64_t step,
                                                      const v1::View& view,
                                                      uint64_t member,
                                                      absl::Time now) {
  if (last_step_ >= 0 && step == last_step_ + 1) {
    const absl::Duration t = now - last_time_;
    step_time_ =
        step_time_ == absl::ZeroDuration() ? t : step_time_ * 0.75 + t * 0.25;
  }
  if (step != last_step_) {
    last_step_ = step;
    last_time_ = now;
  }
  held_.erase(held_.begin(), held_.lower_bound(step));
  // Leases of another view go (the view changed: they are asked again).
  for (auto h = held_.begin(); h != held_.end();) {
    h = Valid(h->second, view, member) ? std::next(h) : held_.erase(h);
  }
  auto it = held_.find(step);
  if (it == held_.end()) return std::nullopt;
  v1::LeaseWorkResponse lease = std::move(it->second.lease);
  held_.erase(it);
  return lease;
}

int LeaseAhead::HeldAfter(int64_t step) const {
  return static_cast<int>(std::distance(held_.upper_bound(step), held_.end()));
}

int LeaseAhead::WantAhead(int64_t step, absl::Time now) const {
  if (cover_ <= absl::ZeroDuration() || now < retry_after_) return 0;
  int want = kFirstAhead;
  if (step_time_ > absl::ZeroDuration()) {
    want = static_cast<int>(std::min<double>(
        kMaxAhead, std::ceil(absl::FDivDuration(cover_, step_time_))));
  }
  want = std::clamp(want, 1, kMaxAhead);
  return HeldAfter(step) > want / 2 ? 0 : want;
}

void LeaseAhead::Keep(const v1::LeaseWorkResponse& resp, uint64_t member,
                      uint64_t generation) {
  retry_after_ = absl::InfinitePast();
  backoff_ = absl::Seconds(1);
  for (const v1::LeaseWorkResponse& ahead : resp.leased_ahead()) {
    held_[ahead.step()] = Held{ahead, member, generation};
  }
}

void LeaseAhead::AskFailed(absl::Time now) {
  retry_after_ = now + backoff_;
  backoff_ = std::min(backoff_ * 2, absl::Seconds(16));
}

}  // namespace strata
