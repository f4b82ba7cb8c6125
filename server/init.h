// A chunk's initial weights, from its InitSpec: drawn deterministically from
// its stable id (the same model spec gives the same weights on any server,
// in any run), or read from a safetensors file (--init_from).
#ifndef STRATA_SERVER_INIT_H_
#define STRATA_SERVER_INIT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "formats/safetensors.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// Fills w[0..n) as `init` says. NORMAL and UNIFORM draw from a counter-based
// generator keyed by (init.seed, chunk_id), so they do not depend on
// threads or on the order chunks are created in. FILE is not drawn: see
// FillChunkInit (here it fills zeros).
void FillInit(const v1::InitSpec& init, uint64_t chunk_id, float* w, size_t n);

// The init files one registration reads, each opened once (its chunks
// name one file). Not thread-safe; the files stay mapped while it lives.
class InitFiles {
 public:
  // The safetensors file at `path`, opened on first use. The errors of
  // SafetensorsFile::Open (not kept: a later call tries again).
  absl::StatusOr<const SafetensorsFile*> Get(const std::string& path);

 private:
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

// Checks that chunk `spec`'s init can be made: for FILE, that the file
// opens, is a valid safetensors file of the size the spec names, and holds
// a tensor `source` that fits the chunk's tensor shape (CheckFits in
// formats/safetensors.h). Errors name the file and the tensor:
// FAILED_PRECONDITION for a file this server cannot open or whose size
// differs, INVALID_ARGUMENT for a missing or unfitting tensor, DATA_LOSS
// for a malformed file. OK for every other kind.
// `files` (null: the file is opened for this call) keeps the files opened.
absl::Status CheckChunkInit(const v1::ChunkSpec& spec,
                            InitFiles* files = nullptr);

// Fills the chunk's spec.numel() weights at `w` from its init: FillInit, or
// for FILE the chunk's elements read from the file (CheckChunkInit's
// errors, and the file's read errors).
absl::Status FillChunkInit(const v1::ChunkSpec& spec, float* w,
                           InitFiles* files = nullptr);

}  // namespace strata

#endif  // STRATA_SERVER_INIT_H_
