// One rank of a Gloo group in its own process, for tests/collective_test.cc:
// joins group "dp" at --epoch through the scheduler's KV and all-reduces
// {rank + 1} --steps times, checking each sum. When an all-reduce fails and
// --next_epoch is set, it joins that epoch's group (as --next_rank of
// --next_size) and runs --next_steps there. Exit 0: every step it ran was
// right; 3: a collective failed with no next epoch; 4: a wrong sum; 2: setup.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "cluster/scheduler_client.h"
#include "collective/kv_rendezvous.h"

namespace {

// Runs `steps` all-reduces; the first failure, or OK.
absl::Status RunSteps(strata::Communicator& comm, int steps, bool* wrong) {
  const float want = float(comm.size() * (comm.size() + 1) / 2);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> data = {float(comm.rank() + 1)};
    absl::Status status =
        comm.AllReduce(absl::MakeSpan(data), strata::ReduceOp::kSum);
    if (!status.ok()) return status;
    if (data[0] != want) {
      std::fprintf(stderr, "step %d: sum %g, want %g\n", s, data[0], want);
      *wrong = true;
      return absl::OkStatus();
    }
    std::fprintf(stderr, "epoch step %d ok\n", s);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("collective_peer");
  std::string scheduler;
  int rank = 0, size = 1, steps = 1, next_rank = -1, next_size = 0,
      next_steps = 1;
  uint64_t epoch = 1, next_epoch = 0;
  app.add_option("--scheduler", scheduler)->required();
  app.add_option("--rank", rank);
  app.add_option("--size", size);
  app.add_option("--epoch", epoch);
  app.add_option("--steps", steps);
  app.add_option("--next_epoch", next_epoch);
  app.add_option("--next_rank", next_rank);
  app.add_option("--next_size", next_size);
  app.add_option("--next_steps", next_steps);
  CLI11_PARSE(app, argc, argv);

  strata::SchedulerClientOptions client_options;
  client_options.scheduler_address = scheduler;
  auto client = strata::SchedulerClient::Connect(client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 2;
  }
  strata::GlooOptions options;
  options.rank = rank;
  options.size = size;
  options.comm.timeout = absl::Seconds(30);
  auto comm = strata::JoinGlooGroup(client->get(), "dp", epoch, options);
  if (!comm.ok()) {
    std::fprintf(stderr, "join: %s\n", comm.status().ToString().c_str());
    return 2;
  }
  bool wrong = false;
  absl::Status status = RunSteps(**comm, steps, &wrong);
  if (wrong) return 4;
  if (status.ok()) return 0;
  std::fprintf(stderr, "collective failed: %s\n", status.ToString().c_str());
  if (next_epoch == 0) return 3;
  comm->reset();
  options.rank = next_rank;
  options.size = next_size;
  comm = strata::JoinGlooGroup(client->get(), "dp", next_epoch, options);
  if (!comm.ok()) {
    std::fprintf(stderr, "rejoin: %s\n", comm.status().ToString().c_str());
    return 2;
  }
  status = RunSteps(**comm, next_steps, &wrong);
  if (wrong) return 4;
  if (!status.ok()) {
    std::fprintf(stderr, "after rejoin: %s\n", status.ToString().c_str());
    return 3;
  }
  return 0;
}
