#include "common/clock.h"

namespace strata {
namespace {
class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};
}  // namespace

Clock* Clock::Real() {
  static Clock* clock = new RealClock();
  return clock;
}

}  // namespace strata
