// The model a worker declares to the servers (PsClient::RegisterModel):
// one tensor per parameter, AdamW with decay on matrices only and the
// trainer's learning-rate schedule, initial values drawn on the servers or
// read there from --init_from's file. python/strata/gpt.py's server_model
// registers the same for a Python worker in the same job (the servers
// refuse a model that differs; python/tests/test_mixed.py runs both).
#ifndef STRATA_TRAINER_SERVER_MODEL_H_
#define STRATA_TRAINER_SERVER_MODEL_H_

#include <vector>

#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "model/model.h"
#include "trainer/trainer.h"

namespace strata {

// With o.init_from, every tensor starts from that file (InitSpec FILE);
// its errors are MatchHfGpt2's (model/hf_gpt2.h) and the file's. With
// o.compress "onebit" and o.compress_freeze_variance, the second moments of
// Adam, AdamW and LAMB freeze from the first compressed step
// (OptimizerConfig.freeze_variance_after).
absl::StatusOr<ModelSpec> ServerModel(const std::vector<ParamInfo>& params,
                                      const TrainerOptions& o);

// TrainerOptions::compress parsed: the wire type (DTYPE_UNSPECIFIED: none)
// and TOPK's ratio. INVALID_ARGUMENT for another text or a ratio outside
// (0, 1].
struct PushCompression {
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  double ratio = 0.01;
};
absl::StatusOr<PushCompression> ParseCompression(const std::string& text);
// Whether o asks for DGC's momentum correction (TrainerOptions::
// momentum_correction: topk with sgd), and the worker's momentum then.
bool MomentumCorrection(const TrainerOptions& o);
inline constexpr float kSgdMomentum = 0.9f;
// The first step pushed compressed (compress_from, or warmup_steps; 0
// with MomentumCorrection, whose momentum lives on the worker from the
// start).
int64_t CompressFromStep(const TrainerOptions& o);

}  // namespace strata

#endif  // STRATA_TRAINER_SERVER_MODEL_H_
