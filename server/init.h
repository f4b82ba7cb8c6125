// Deterministic initial weights for a chunk, from its InitSpec and stable id:
// the same model spec gives the same weights on any server, in any run.
#ifndef STRATA_SERVER_INIT_H_
#define STRATA_SERVER_INIT_H_

#include <cstddef>
#include <cstdint>

#include "strata/v1/ps.pb.h"

namespace strata {

// Fills w[0..n) as `init` says. NORMAL and UNIFORM draw from a counter-based
// generator keyed by (init.seed, chunk_id), so they do not depend on
// threads or on the order chunks are created in.
void FillInit(const v1::InitSpec& init, uint64_t chunk_id, float* w, size_t n);

}  // namespace strata

#endif  // STRATA_SERVER_INIT_H_
