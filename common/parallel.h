// The process's one parallel loop: a fixed pool of threads that runs blocked
// loops. The CPU model kernels (kernels/), their GEMMs included (OpenBLAS is
// held to one thread, kernels/matmul.cc), and the servers' optimizer
// (optim/) all split their work through ParallelFor, so on a small machine
// no two pools fight for the cores.
#ifndef STRATA_COMMON_PARALLEL_H_
#define STRATA_COMMON_PARALLEL_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace strata {

// The number of threads a ParallelFor uses (the caller included): the
// hardware concurrency, or what SetNumThreads set. At least 1.
int NumThreads();

// Sets the number of threads later ParallelFor calls use (clamped to
// [1, hardware concurrency]). Not thread-safe with concurrent ParallelFor.
void SetNumThreads(int n);

// Runs fn(chunk, begin, end) over NumChunks(n, grain) contiguous chunks that
// partition [0, n), each at least `grain` long (except when n < grain), on
// up to NumThreads() threads (the caller included; idle threads claim the
// next chunk), and returns when all are done. The split depends only on n,
// grain and NumThreads(), never on timing, so results are reproducible. Calls
// from inside fn run inline on the calling thread. Concurrent callers are
// serialized. REQUIRES: n >= 0, grain >= 1.
void ParallelFor(
    int64_t n, int64_t grain,
    absl::FunctionRef<void(int chunk, int64_t begin, int64_t end)> fn);

// True on a pool thread inside ParallelFor (where nested calls run inline).
bool InParallelRegion();

// The number of chunks ParallelFor(n, grain, ...) uses (for per-chunk
// scratch buffers): at most 4 per thread, 1 with a single thread.
int NumChunks(int64_t n, int64_t grain);

}  // namespace strata

#endif  // STRATA_COMMON_PARALLEL_H_
