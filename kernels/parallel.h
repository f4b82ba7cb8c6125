// The CPU kernels' threading: one fixed pool of threads that runs blocked
// loops, and the OpenBLAS setting that goes with it.
//
// Every CPU kernel parallelizes through ParallelFor, and GEMMs are split
// across the same pool (matmul.h), with OpenBLAS itself held to one thread:
// two pools that both spin on a 2-core machine would fight for the cores.
#ifndef STRATA_KERNELS_PARALLEL_H_
#define STRATA_KERNELS_PARALLEL_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace strata::kernels {

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

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_PARALLEL_H_
