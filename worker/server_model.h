// The model a worker declares to the servers (PsClient::RegisterModel):
// one tensor per parameter, AdamW with decay on matrices only and the
// trainer's learning-rate schedule, initial values drawn on the servers.
#ifndef STRATA_WORKER_SERVER_MODEL_H_
#define STRATA_WORKER_SERVER_MODEL_H_

#include "client/ps_client.h"
#include "worker/model.h"
#include "worker/trainer.h"

namespace strata {

ModelSpec ServerModel(const Model& gpt, const TrainerOptions& o);

}  // namespace strata

#endif  // STRATA_WORKER_SERVER_MODEL_H_
