// Process-wide allocator settings for processes that move tensor payloads.
#ifndef STRATA_COMMON_MALLOC_TUNING_H_
#define STRATA_COMMON_MALLOC_TUNING_H_

#include <malloc.h>

namespace strata {

// Multi-MiB buffers come and go with every push and pull (gRPC's receive
// buffers, response slices). With glibc's defaults each is a fresh mmap, or
// heap memory trimmed back to the OS on free, so every message pays page
// faults and zeroing for its whole size: measured at ~15% of a push/pull
// run's CPU and 22% of its throughput before this tuning. Serving them
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
// read, on many threads. With the settings above each thread's arena keeps
// what its tiles used (measured: 415 MiB of peak RSS growth for a 32 MiB
// budget, more than the 192 MiB state; tests/tier_test.cc). Mapping and
// unmapping each tile instead (a 256 KiB threshold) bounded that, but then
// every tile read paid its page faults and zeroing: about a quarter of a
// tiered server's CPU by perf, where a tiered run is CPU-bound on few
// cores. So tiles come from the heap (mmap only beyond 32 MiB) of at most
// two arenas, which recycle what the tiles free, and free heap beyond 64
// MiB goes back: a tiered run is faster, at some more peak RSS, still
// within the budget test's bound (budget + 128 MiB). Call before the server's
// threads start (the arena cap holds for arenas made later).
inline void TuneMallocForBudget() {
  mallopt(M_ARENA_MAX, 2);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_TOP_PAD, 0);
}

}  // namespace strata

#endif  // STRATA_COMMON_MALLOC_TUNING_H_
