// How much of a process's processor time sat idle between two readings: a
// CPU worker reports the idle share of its waits with it (scheduler.proto
// StepTiming.idle_s): a wait whose cores other processes used costs the
// job nothing, and an asynchronous mode could not put it to work. The
// processors are the host's (/proc/stat), or, in a cgroup v2 with a CPU
// quota (a container run with `--cpus`), the quota's: its usage against
// the quota's share of the wall time.
#ifndef STRATA_COMMON_HOST_CPU_H_
#define STRATA_COMMON_HOST_CPU_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace strata {

// Where processor time is counted.
struct CpuSource {
  std::string proc_stat = "/proc/stat";
  // With cores > 0: a cgroup v2 directory whose cpu.max allows `cores`
  // processors' time (quota / period); its cpu.stat counts the usage.
  std::string cgroup_dir;
  double cores = 0;
};

// This process's: its cgroup v2's (the "0::<path>" line of
// <root>/proc/self/cgroup, under <root>/sys/fs/cgroup) when its cpu.max
// sets a quota, else the host's <root>/proc/stat. `root` is for tests.
CpuSource FindCpuSource(const std::string& root = "");

// Processor time, in the source's units (ticks, or microseconds): only
// differences between two readings mean anything.
struct CpuTime {
  double idle = 0;
  double total = 0;
};

// The host's: the first line of source.proc_stat ("cpu  user nice system
// idle iowait irq softirq steal guest guest_nice"; idle and iowait are
// idle, guest time is in user and nice already). A cgroup's: total the
// monotonic clock's microseconds times cores, idle that less cpu.stat's
// usage_usec. Errors: the files' (NOT_FOUND for one that cannot be
// opened), and INVALID_ARGUMENT for contents of another shape.
absl::StatusOr<CpuTime> ReadCpuTime(const CpuSource& source);

// The idle share of the processor time from `before` to `after`, in
// [0, 1] (0 where the idle count went back: a cgroup over its quota for a
// moment, or a host's iowait count, which may fall); nullopt when no time
// passed (two readings within a clock tick).
std::optional<double> IdleShare(const CpuTime& before, const CpuTime& after);

}  // namespace strata

#endif  // STRATA_COMMON_HOST_CPU_H_
