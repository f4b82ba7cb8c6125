// The scheduler's unit-test fixture: a scheduler on a simulated clock and
// a stub to it, with one helper per RPC the tests make. Shared by the
// scheduler's test files (scheduler/scheduler*_test.cc).
#ifndef STRATA_TESTING_SCHEDULER_SCHEDULER_FIXTURE_H_
#define STRATA_TESTING_SCHEDULER_SCHEDULER_FIXTURE_H_

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "strata/v1/scheduler.grpc.pb.h"
#include "testing/temp_dir.h"

namespace strata {

using ::strata::testing::TempDir;

class SchedulerTest : public ::testing::Test {
 protected:
  // Starts a scheduler on the simulated clock and connects a stub to it.
  // The tests' clock arithmetic uses a 10 s lease (not the default).
  void Start(SchedulerOptions options = {.lease = absl::Seconds(10)}) {
    options.clock = &clock_;
    auto s = Scheduler::Start(options);
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = *std::move(s);
    stub_ = v1::Scheduler::NewStub(grpc::CreateChannel(
        scheduler_->address(), grpc::InsecureChannelCredentials()));
  }

  absl::StatusOr<v1::RegisterResponse> Register(v1::Role role, int shard = 0,
                                                std::string address = "") {
    v1::RegisterRequest req;
    req.set_role(role);
    req.set_shard(shard);
    req.set_address(address.empty() && role == v1::ROLE_SERVER
                        ? absl::StrCat("10.0.0.1:", 7000 + shard)
                        : address);
    req.set_capacity(1.0);
    grpc::ClientContext ctx;
    v1::RegisterResponse resp;
    absl::Status s = FromGrpcStatus(stub_->Register(&ctx, req, &resp));
    if (!s.ok()) return s;
    return resp;
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(uint64_t id,
                                                  int64_t step = 0) {
    v1::HeartbeatRequest req;
    req.set_member_id(id);
    req.set_clock(step);
    req.set_samples_per_sec(100.0);
    grpc::ClientContext ctx;
    v1::HeartbeatResponse resp;
    absl::Status s = FromGrpcStatus(stub_->Heartbeat(&ctx, req, &resp));
    if (!s.ok()) return s;
    return resp;
  }

  absl::Status CaughtUp(uint64_t id, uint64_t primary) {
    v1::CaughtUpRequest req;
    req.set_member_id(id);
    req.set_primary_member_id(primary);
    grpc::ClientContext ctx;
    v1::CaughtUpResponse resp;
    return FromGrpcStatus(stub_->CaughtUp(&ctx, req, &resp));
  }

  absl::Status Leave(uint64_t id) {
    v1::LeaveRequest req;
    req.set_member_id(id);
    grpc::ClientContext ctx;
    v1::LeaveResponse resp;
    return FromGrpcStatus(stub_->Leave(&ctx, req, &resp));
  }

  absl::StatusOr<uint64_t> Put(const std::string& key, const std::string& value,
                               bool cas = false, uint64_t expected = 0,
                               std::string* current_revision = nullptr) {
    v1::KvPutRequest req;
    req.set_key(key);
    req.set_value(value);
    req.set_cas(cas);
    req.set_expected_revision(expected);
    grpc::ClientContext ctx;
    v1::KvPutResponse resp;
    absl::Status s = FromGrpcStatus(stub_->KvPut(&ctx, req, &resp));
    if (current_revision != nullptr) {
      auto it = ctx.GetServerTrailingMetadata().find("strata-kv-revision");
      if (it != ctx.GetServerTrailingMetadata().end()) {
        *current_revision = std::string(it->second.data(), it->second.size());
      }
    }
    if (!s.ok()) return s;
    return resp.revision();
  }

  absl::StatusOr<v1::KvGetResponse> Get(const std::string& key,
                                        int64_t wait_ms = 0) {
    v1::KvGetRequest req;
    req.set_key(key);
    req.set_wait_ms(wait_ms);
    grpc::ClientContext ctx;
    v1::KvGetResponse resp;
    absl::Status s = FromGrpcStatus(stub_->KvGet(&ctx, req, &resp));
    if (!s.ok()) return s;
    return resp;
  }

  // A lease for a job of batch 8, 100 samples per epoch, one slot, and
  // `total_samples` in all (0: no end).
  absl::StatusOr<v1::LeaseWorkResponse> LeaseWork(uint64_t id, int64_t step,
                                                  int64_t total_samples = 0) {
    v1::LeaseWorkRequest req;
    req.set_member_id(id);
    req.set_step(step);
    req.mutable_job()->set_total_samples(total_samples);
    req.mutable_job()->set_batch(8);
    req.mutable_job()->set_samples_per_epoch(100);
    req.mutable_job()->add_slots(0);
    grpc::ClientContext ctx;
    v1::LeaseWorkResponse resp;
    absl::Status s = FromGrpcStatus(stub_->LeaseWork(&ctx, req, &resp));
    if (!s.ok()) return s;
    return resp;
  }

  SimulatedClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<v1::Scheduler::Stub> stub_;
};

// A server registration of `shard` with the data directory `dir_id`, its
// snapshot steps `held`; `worker`/`incarnation` for registering again.
inline absl::StatusOr<v1::RegisterResponse> RegisterServer(
    v1::Scheduler::Stub& stub, int shard, const std::string& dir_id,
    std::vector<int64_t> held, uint64_t worker = 0, uint64_t incarnation = 0) {
  v1::RegisterRequest req;
  req.set_role(v1::ROLE_SERVER);
  req.set_shard(shard);
  req.set_address(absl::StrCat("10.0.0.1:", 7000 + shard));
  req.set_data_dir_id(dir_id);
  for (int64_t s : held) req.add_snapshots(s);
  req.set_worker(worker);
  req.set_incarnation(incarnation);
  grpc::ClientContext ctx;
  v1::RegisterResponse resp;
  absl::Status s = FromGrpcStatus(stub.Register(&ctx, req, &resp));
  if (!s.ok()) return s;
  return resp;
}

}  // namespace strata

#endif  // STRATA_TESTING_SCHEDULER_SCHEDULER_FIXTURE_H_
