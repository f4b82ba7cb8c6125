// Process-wide allocator settings for processes that move tensor payloads.
#ifndef STRATA_COMMON_MALLOC_TUNING_H_
#define STRATA_COMMON_MALLOC_TUNING_H_

#include <malloc.h>

namespace strata {

// Multi-MiB buffers come and go with every push and pull (gRPC's receive
// buffers, response slices). With glibc's defaults each is a fresh mmap, or
// heap memory trimmed back to the OS on free, so every message pays page
// faults and zeroing for its whole size: measured at ~15% of a push/pull
// run's CPU and 22% of its throughput (docs/BENCHMARKS.md). Serving them
// from the heap (mmap only beyond 32 MiB, glibc's maximum) and keeping
// freed memory (trim only beyond 1 GiB) makes the memory recycle. Call at
// the start of main, before threads start.
inline void TuneMallocForPayloads() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

// For a server under a RAM budget (--ram_budget), where memory kept for
// reuse is memory over budget: tiles come and go with every spill and
// read, on many threads, and with the settings above each thread's arena
// keeps what its tiles used (measured: 415 MiB of peak RSS growth for a
// 32 MiB budget, more than the 192 MiB state; tests/tier_test.cc). Buffers
// of 256 KiB and more are then mapped and unmapped one by one (paying page
// faults on each, which the disk reads they come with dwarf), and free heap
// beyond 16 MiB goes back. May be called once threads run.
inline void TuneMallocForBudget() {
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
  mallopt(M_TOP_PAD, 0);
}

}  // namespace strata

#endif  // STRATA_COMMON_MALLOC_TUNING_H_
