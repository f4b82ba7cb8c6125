// The host's processor time, as /proc/stat counts it: how much of it sat
// idle between two readings. A CPU worker reports the idle share of its
// waits with it (scheduler.proto StepTiming.idle_s): a wait whose cores
// other processes on the host used costs the job nothing, and an
// asynchronous mode could not put it to work.
#ifndef STRATA_COMMON_HOST_CPU_H_
#define STRATA_COMMON_HOST_CPU_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace strata {

// Clock ticks summed over the host's processors since boot.
struct HostCpuTicks {
  uint64_t idle = 0;   // idle and iowait
  uint64_t total = 0;  // every state
};

// The first line ("cpu  user nice system idle iowait irq softirq steal
// ...") of `path`. Errors: the file's (NOT_FOUND without procfs), and
// INVALID_ARGUMENT for a first line of another shape.
absl::StatusOr<HostCpuTicks> ReadHostCpu(
    const std::string& path = "/proc/stat");

// The idle share of the host's processor time from `before` to `after`,
// in [0, 1]; 0 when no tick passed or the counters went back.
double IdleShare(const HostCpuTicks& before, const HostCpuTicks& after);

}  // namespace strata

#endif  // STRATA_COMMON_HOST_CPU_H_
