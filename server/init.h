// Deterministic initial weights for a chunk, from its InitSpec and stable id:
// the same model spec gives the same weights on any server, in any run.
#ifndef STRATA_SERVER_INIT_H_
#define STRATA_SERVER_INIT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Fills w[0..n) as `init` says. NORMAL and UNIFORM draw from a counter-based
// generator keyed by (init.seed, chunk_id), so they do not depend on
// threads or on the order chunks are created in. FILE is not drawn: see
// FillChunkInit (here it fills zeros).
void FillInit(const v1::InitSpec& init, uint64_t chunk_id, float* w, size_t n);

// Checks that chunk `spec`'s init can be made: for FILE, that the file
// opens, is a valid safetensors file of the size the spec names, and holds
// a tensor `source` that fits the chunk's tensor shape (CheckFits in
// formats/safetensors.h). Errors name the file and the tensor:
// FAILED_PRECONDITION for a file this server cannot open or whose size
// differs, INVALID_ARGUMENT for a missing or unfitting tensor, DATA_LOSS
// for a malformed file. OK for every other kind.
absl::Status CheckChunkInit(const v1::ChunkSpec& spec);

// Fills the chunk's spec.numel() weights at `w` from its init: FillInit, or
// for FILE the chunk's elements read from the file (CheckChunkInit's
// errors, and the file's read errors).
absl::Status FillChunkInit(const v1::ChunkSpec& spec, float* w);

}  // namespace strata

#endif  // STRATA_SERVER_INIT_H_
