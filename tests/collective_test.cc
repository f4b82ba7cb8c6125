// Gloo groups of real processes formed through a real scheduler: kill -9
// of one rank mid-run fails the others' collective with an error (never a
// hang), the survivors re-form at the next epoch with a newly started
// process in the group, and the new group sums right.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster/scheduler_client.h"
#include "collective/kv_rendezvous.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "tests/process_util.h"

namespace strata {
namespace {

using ::strata::testing::Child;

std::string LogPath(const std::string& name) {
  return testing::TestRoot() + "/" + name + ".log";
}

std::unique_ptr<Child> StartPeer(const std::string& scheduler,
                                 std::vector<std::string> args,
                                 const std::string& name) {
  std::vector<std::string> argv = {COLLECTIVE_PEER, "--scheduler", scheduler};
  argv.insert(argv.end(), args.begin(), args.end());
  auto child = std::make_unique<Child>(argv, LogPath(name));
  EXPECT_TRUE(child->started()) << name;
  return child;
}

absl::Status AllReduceOnce(Communicator& comm, float* sum) {
  std::vector<float> data = {float(comm.rank() + 1)};
  absl::Status status = comm.AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
  *sum = data[0];
  return status;
}

TEST(Collective, AKilledRankFailsTheGroupAndTheRestReformWithANewcomer) {
  auto scheduler = Scheduler::Start({});
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const std::string address = (*scheduler)->address();
  SchedulerClientOptions client_options;
  client_options.scheduler_address = address;
  auto client = SchedulerClient::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();

  // Epoch 1: this process is rank 0 of 3; rank 1 will re-form at epoch 2,
  // rank 2 is the one killed.
  auto survivor =
      StartPeer(address,
                {"--rank", "1", "--size", "3", "--epoch", "1", "--steps",
                 "1000000", "--next_epoch", "2", "--next_rank", "1",
                 "--next_size", "3", "--next_steps", "3"},
                "survivor");
  auto victim = StartPeer(
      address,
      {"--rank", "2", "--size", "3", "--epoch", "1", "--steps", "1000000"},
      "victim");
  GlooOptions options;
  options.rank = 0;
  options.size = 3;
  options.comm.timeout = absl::Seconds(30);
  auto comm = JoinGlooGroup(client->get(), "dp", 1, options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  float sum = 0;
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(AllReduceOnce(**comm, &sum).ok());
    ASSERT_EQ(sum, 6.0f);
  }

  victim->Stop(SIGKILL);
  absl::Status failed;
  for (int step = 0; step < 1000 && failed.ok(); ++step) {
    failed = AllReduceOnce(**comm, &sum);
  }
  EXPECT_TRUE(absl::IsUnavailable(failed) || absl::IsDeadlineExceeded(failed))
      << failed;
  EXPECT_NE(failed.message().find("gloo"), std::string::npos) << failed;

  // Epoch 2: the survivor, this process and a newly started rank 2.
  comm->reset();
  auto newcomer = StartPeer(
      address, {"--rank", "2", "--size", "3", "--epoch", "2", "--steps", "3"},
      "newcomer");
  auto reformed = JoinGlooGroup(client->get(), "dp", 2, options);
  ASSERT_TRUE(reformed.ok()) << reformed.status();
  // The survivor and the newcomer each run 3 steps at epoch 2.
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(AllReduceOnce(**reformed, &sum).ok());
    EXPECT_EQ(sum, 6.0f);
  }
  EXPECT_EQ(newcomer->Wait(absl::Seconds(60)), 0)
      << "newcomer log: " << LogPath("newcomer");
  EXPECT_EQ(survivor->Wait(absl::Seconds(60)), 0)
      << "survivor log: " << LogPath("survivor");
}

}  // namespace
}  // namespace strata
