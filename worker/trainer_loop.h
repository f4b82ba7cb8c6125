// The step loop of a worker that has joined its job (worker/trainer.cc),
// which RunTrainer (worker/run_trainer.cc) starts once it has set up.
// Private to worker/.
#ifndef STRATA_WORKER_TRAINER_LOOP_H_
#define STRATA_WORKER_TRAINER_LOOP_H_

#include <memory>

#include "absl/status/status.h"
#include "client/ps_client.h"
#include "cluster/worker_session.h"
#include "data/dataset.h"
#include "worker/model.h"
#include "worker/trainer.h"

namespace strata {

// Trains from the step the servers are at to `o.steps` (or until o.stop),
// then writes the outputs. `o` must outlive the call; `ps` has the model
// registered. Errors: the first failing push, pull or scheduler call.
absl::Status RunTrainerLoop(const TrainerOptions& o, std::unique_ptr<Model> gpt,
                            std::unique_ptr<TokenDataset> data,
                            WorkerSession session,
                            std::unique_ptr<PsClient> ps);

}  // namespace strata

#endif  // STRATA_WORKER_TRAINER_LOOP_H_
