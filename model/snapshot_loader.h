// A trained model's weights back from its servers' snapshots (what
// `strata generate` samples from after a run).
#ifndef STRATA_MODEL_SNAPSHOT_LOADER_H_
#define STRATA_MODEL_SNAPSHOT_LOADER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace strata {

// Fills every parameter of `model` from the snapshots in the servers' data
// directories under `dir` (server-0, server-1, ...: the layout of `strata
// local`), all taken at one step: the newest step every server holds a
// snapshot of, so the weights are one consistent cut. Returns that step.
// The directories are not claimed: the servers may be running (each
// snapshot is read from hard links made beside its directory, so one
// pruned meanwhile is read whole or the newest common step is looked for
// again).
// Errors: NOT_FOUND if there is no server-0 directory or a server has no
// snapshot; FAILED_PRECONDITION if no step is held by every server or a
// snapshot's tensor does not fit the model; DATA_LOSS if a chunk is corrupt
// or some values of a parameter are in no snapshot.
absl::StatusOr<int64_t> LoadFromSnapshots(const std::string& dir, Model& model);

}  // namespace strata

#endif  // STRATA_MODEL_SNAPSHOT_LOADER_H_
