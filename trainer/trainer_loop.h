// The step loop of a worker that has joined its job (trainer/trainer.cc),
// which RunTrainer (trainer/run_trainer.cc) starts once it has set up.
// Private to trainer/.
#ifndef STRATA_TRAINER_TRAINER_LOOP_H_
#define STRATA_TRAINER_TRAINER_LOOP_H_

#include <memory>

#include "absl/status/status.h"
#include "client/ps_client.h"
#include "cluster/worker_session.h"
#include "data/dataset.h"
#include "model/model.h"
#include "trainer/trainer.h"

namespace strata {

// Trains from the step the servers are at to `o.steps` (or until o.stop),
// then writes the outputs. `o` must outlive the call; `ps` has the model
// registered. Errors: the first failing push, pull or scheduler call.
absl::Status RunTrainerLoop(const TrainerOptions& o, std::unique_ptr<Model> gpt,
                            std::unique_ptr<TokenDataset> data,
                            WorkerSession session,
                            std::unique_ptr<PsClient> ps);

}  // namespace strata

#endif  // STRATA_TRAINER_TRAINER_LOOP_H_
