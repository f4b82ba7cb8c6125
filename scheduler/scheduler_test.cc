#include "scheduler/scheduler.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/kv_store.h"
#include "strata/v1/scheduler.grpc.pb.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh empty directory under the test temp dir.
std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(base != nullptr ? base : fs::temp_directory_path()) /
                 absl::StrCat("scheduler_test_", getpid(), "_", name);
  fs::remove_all(dir);
  return dir.string();
}

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

  absl::StatusOr<v1::LeaseWorkResponse> LeaseWork(uint64_t id, int64_t step) {
    v1::LeaseWorkRequest req;
    req.set_member_id(id);
    req.set_step(step);
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

TEST_F(SchedulerTest, RegisterHeartbeatLeave) {
  Start();
  const uint64_t epoch0 = scheduler_->CurrentView().epoch();
  auto reg = Register(v1::ROLE_WORKER);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->member_id(), 1u);
  EXPECT_EQ(reg->lease_ms(), 10000);
  EXPECT_EQ(reg->view().epoch(), epoch0 + 1);
  EXPECT_EQ(reg->view().workers_epoch(), epoch0 + 1);
  ASSERT_EQ(reg->view().workers_size(), 1);
  EXPECT_EQ(reg->view().workers(0).id(), 1u);
  EXPECT_EQ(reg->view().workers(0).shard(), -1);
  EXPECT_EQ(reg->view().consistency(), "bsp");

  // Progress shows in the view without a new epoch.
  auto hb = Heartbeat(1, /*step=*/7);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->epoch(), epoch0 + 1);
  v1::View view = scheduler_->CurrentView();
  EXPECT_EQ(view.epoch(), epoch0 + 1);
  EXPECT_EQ(view.workers(0).clock(), 7);
  EXPECT_EQ(view.workers(0).samples_per_sec(), 100.0);

  // What no member could report is refused and leaves the view as it was.
  for (auto [clock, speed] : std::vector<std::pair<int64_t, double>>{
           {-5, 1.0},
           {std::numeric_limits<int64_t>::max(), 1.0},
           {8, std::nan("")},
           {8, -1.0},
           {8, std::numeric_limits<double>::infinity()}}) {
    v1::HeartbeatRequest bad;
    bad.set_member_id(1);
    bad.set_clock(clock);
    bad.set_samples_per_sec(speed);
    grpc::ClientContext ctx;
    v1::HeartbeatResponse resp;
    EXPECT_EQ(stub_->Heartbeat(&ctx, bad, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << clock << " " << speed;
  }
  view = scheduler_->CurrentView();
  EXPECT_EQ(view.workers(0).clock(), 7);
  EXPECT_EQ(view.workers(0).samples_per_sec(), 100.0);

  ASSERT_TRUE(Leave(1).ok());
  view = scheduler_->CurrentView();
  EXPECT_EQ(view.epoch(), epoch0 + 2);
  EXPECT_EQ(view.workers_size(), 0);
  EXPECT_TRUE(absl::IsNotFound(Heartbeat(1).status()));
  EXPECT_TRUE(absl::IsNotFound(Leave(1)));
  // Ids are never reused.
  EXPECT_EQ(Register(v1::ROLE_WORKER)->member_id(), 2u);
}

TEST_F(SchedulerTest, LeaseExpiryRemovesMemberAndRaisesEpoch) {
  Start();
  const uint64_t w1 = Register(v1::ROLE_WORKER)->member_id();
  const uint64_t w2 = Register(v1::ROLE_WORKER)->member_id();
  const uint64_t epoch = scheduler_->CurrentView().epoch();
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(w1).ok());
  clock_.Advance(absl::Seconds(5));  // w2 is 11 s silent, w1 5 s
  scheduler_->CheckLeasesNow();

  v1::View view = scheduler_->CurrentView();
  EXPECT_EQ(view.epoch(), epoch + 1);
  EXPECT_EQ(view.workers_epoch(), epoch + 1);
  ASSERT_EQ(view.workers_size(), 1);
  EXPECT_EQ(view.workers(0).id(), w1);
  EXPECT_TRUE(absl::IsNotFound(Heartbeat(w2).status()));
  EXPECT_TRUE(Heartbeat(w1).ok());
}

TEST_F(SchedulerTest, ClientsHoldLeasesButStayOutOfTheView) {
  Start();
  const uint64_t epoch = scheduler_->CurrentView().epoch();
  auto reg = Register(v1::ROLE_CLIENT);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(reg->view().epoch(), epoch);
  EXPECT_EQ(reg->view().workers_size(), 0);
  EXPECT_TRUE(Heartbeat(reg->member_id()).ok());
  EXPECT_TRUE(Leave(reg->member_id()).ok());
  EXPECT_EQ(scheduler_->CurrentView().epoch(), epoch);
}

TEST_F(SchedulerTest, ServersOccupyOneShardSlotEach) {
  Start({.num_shards = 2, .lease = absl::Seconds(10)});
  auto s0 = Register(v1::ROLE_SERVER, 0, "a:1");
  ASSERT_TRUE(s0.ok()) << s0.status();
  EXPECT_EQ(s0->view().shard_map().slots_size(), 2);
  EXPECT_EQ(s0->view().shard_map().slots(0).member_id(), s0->member_id());
  EXPECT_EQ(s0->view().shard_map().slots(0).address(), "a:1");
  EXPECT_EQ(s0->view().shard_map().slots(1).member_id(), 0u);
  const uint64_t version = s0->view().shard_map().version();

  auto dup = Register(v1::ROLE_SERVER, 0, "b:1");
  EXPECT_TRUE(absl::IsFailedPrecondition(dup.status())) << dup.status();
  EXPECT_THAT(dup.status().message(), HasSubstr("already served"));
  EXPECT_TRUE(absl::IsInvalidArgument(Register(v1::ROLE_SERVER, 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Register(v1::ROLE_SERVER, -1).status()));
  auto s1 = Register(v1::ROLE_SERVER, 1, "c:1");
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->view().shard_map().version(), version + 1);

  // Slot 0's server runs out; the slot is freed, then taken again.
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(s1->member_id()).ok());
  clock_.Advance(absl::Seconds(5));
  scheduler_->CheckLeasesNow();
  v1::View view = scheduler_->CurrentView();
  EXPECT_EQ(view.shard_map().slots(0).member_id(), 0u);
  EXPECT_EQ(view.shard_map().slots(0).address(), "");
  EXPECT_EQ(view.shard_map().version(), version + 2);
  auto again = Register(v1::ROLE_SERVER, 0, "b:1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->view().shard_map().slots(0).address(), "b:1");
  EXPECT_EQ(again->view().shard_map().version(), version + 3);
  EXPECT_EQ(again->view().servers_size(), 2);
}

TEST_F(SchedulerTest, ExpiredServerSlotCanBeTakenBeforeTheLeaseCheck) {
  Start({.lease_check_interval = absl::Hours(1)});
  ASSERT_TRUE(Register(v1::ROLE_SERVER, 0, "a:1").ok());
  clock_.Advance(absl::Seconds(11));
  EXPECT_TRUE(Register(v1::ROLE_SERVER, 0, "b:1").ok());
}

TEST_F(SchedulerTest, WatchViewSeesChangesInOrderOfRisingEpoch) {
  Start();
  grpc::ClientContext ctx;
  v1::WatchViewRequest req;
  auto reader = stub_->WatchView(&ctx, req);
  v1::View view;
  ASSERT_TRUE(reader->Read(&view));  // the current view, at once
  uint64_t last = view.epoch();
  for (int i = 0; i < 3; ++i) {
    const uint64_t id = Register(v1::ROLE_WORKER)->member_id();
    ASSERT_TRUE(reader->Read(&view));
    EXPECT_GT(view.epoch(), last);
    EXPECT_EQ(view.workers_size(), i + 1);
    EXPECT_EQ(view.workers(i).id(), id);
    last = view.epoch();
  }
  ASSERT_TRUE(Leave(1).ok());
  ASSERT_TRUE(reader->Read(&view));
  EXPECT_EQ(view.epoch(), last + 1);
  EXPECT_EQ(view.workers_size(), 2);
  ctx.TryCancel();
  while (reader->Read(&view)) {
  }
  reader->Finish();
}

TEST_F(SchedulerTest, WatchViewFromAKnownEpochWaitsForANewerOne) {
  Start();
  grpc::ClientContext ctx;
  v1::WatchViewRequest req;
  req.set_known_epoch(scheduler_->CurrentView().epoch());
  auto reader = stub_->WatchView(&ctx, req);
  ASSERT_TRUE(Register(v1::ROLE_WORKER).ok());
  v1::View view;
  ASSERT_TRUE(reader->Read(&view));
  EXPECT_EQ(view.workers_size(), 1);
  ctx.TryCancel();
  while (reader->Read(&view)) {
  }
  reader->Finish();
}

TEST_F(SchedulerTest, ShutdownEndsWatchStreams) {
  Start();
  grpc::ClientContext ctx;
  auto reader = stub_->WatchView(&ctx, v1::WatchViewRequest());
  v1::View view;
  ASSERT_TRUE(reader->Read(&view));
  const absl::Time start = absl::Now();
  std::thread stopper([&] { scheduler_->Shutdown(); });
  EXPECT_FALSE(reader->Read(&view));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  stopper.join();
  scheduler_->Wait();
  scheduler_->Shutdown();  // idempotent
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(SchedulerTest, KvPutGetAndCompareAndSet) {
  Start();
  EXPECT_EQ(*Put("a", "1"), 1u);
  EXPECT_EQ(*Put("a", "2"), 2u);
  auto got = Get("a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->value(), "2");
  EXPECT_EQ(got->revision(), 2u);

  EXPECT_EQ(*Put("a", "3", /*cas=*/true, 2), 3u);
  std::string current;
  auto bad = Put("a", "x", /*cas=*/true, 2, &current);
  EXPECT_TRUE(absl::IsFailedPrecondition(bad.status())) << bad.status();
  EXPECT_EQ(current, "3");
  EXPECT_EQ(Get("a")->value(), "3");
  EXPECT_EQ(*Put("b", "new", /*cas=*/true, 0), 1u);
  EXPECT_TRUE(absl::IsFailedPrecondition(Put("b", "y", true, 0).status()));
}

// KvDeleteRange deletes [key, range_end) and nothing else, also on disk:
// a restarted scheduler does not bring the keys back.
TEST_F(SchedulerTest, KvDeleteRangeDeletesAHalfOpenRangeForGood) {
  const std::string dir = TempDir("kv_delete");
  Start({.data_dir = dir});
  for (const char* k : {"a", "b/1", "b/2", "b/3", "c"}) {
    ASSERT_TRUE(Put(k, "v").ok());
  }
  auto del = [&](const std::string& from, const std::string& to) {
    v1::KvDeleteRangeRequest req;
    req.set_key(from);
    req.set_range_end(to);
    grpc::ClientContext ctx;
    v1::KvDeleteRangeResponse resp;
    absl::Status s = FromGrpcStatus(stub_->KvDeleteRange(&ctx, req, &resp));
    return s.ok() ? absl::StatusOr<uint64_t>(resp.deleted())
                  : absl::StatusOr<uint64_t>(s);
  };
  EXPECT_EQ(*del("b/", "b/3"), 2u);  // b/1, b/2
  EXPECT_EQ(*del("z", "a"), 0u);     // an empty range
  EXPECT_EQ(*del("b/", ""), 0u);
  scheduler_.reset();
  Start({.data_dir = dir});
  for (const char* k : {"b/1", "b/2"}) {
    EXPECT_TRUE(absl::IsNotFound(Get(k).status())) << k;
  }
  for (const char* k : {"a", "b/3", "c"}) EXPECT_TRUE(Get(k).ok()) << k;
  EXPECT_EQ(*Put("b/1", "again"), 1u);
}

TEST_F(SchedulerTest, KvRefusesKeysAndValuesBeyondItsLimits) {
  Start();
  EXPECT_TRUE(absl::IsInvalidArgument(
      Put(std::string(scheduler_internal::kMaxKvKeyBytes + 1, 'k'), "v")
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Put("k", std::string(scheduler_internal::kMaxKvValueBytes + 1, 'v'))
          .status()));
  EXPECT_TRUE(absl::IsNotFound(Get("k").status()));  // nothing stored
  EXPECT_EQ(*Put(std::string(scheduler_internal::kMaxKvKeyBytes, 'k'),
                 std::string(scheduler_internal::kMaxKvValueBytes, 'v')),
            1u);
}

TEST_F(SchedulerTest, KvGetWaits) {
  Start();
  EXPECT_TRUE(absl::IsNotFound(Get("late").status()));
  EXPECT_TRUE(absl::IsDeadlineExceeded(Get("never", 300).status()));
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_TRUE(Put("late", "here").ok());
  });
  auto got = Get("late", 10000);
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value(), "here");
}

TEST_F(SchedulerTest, RestartOnTheSameDataDirCarriesOn) {
  const std::string dir = TempDir("restart");
  Start({.data_dir = dir, .num_shards = 2});
  const uint64_t server = Register(v1::ROLE_SERVER, 1, "s:1")->member_id();
  const uint64_t worker = Register(v1::ROLE_WORKER)->member_id();
  const uint64_t gone = Register(v1::ROLE_WORKER)->member_id();
  ASSERT_TRUE(Leave(gone).ok());
  ASSERT_TRUE(Put("k", "v").ok());
  ASSERT_TRUE(Put("k", "v2").ok());
  const v1::View before = scheduler_->CurrentView();
  scheduler_.reset();

  clock_.Advance(absl::Hours(1));  // leases restart in full regardless
  Start({.data_dir = dir, .num_shards = 2});
  v1::View after = scheduler_->CurrentView();
  EXPECT_EQ(after.epoch(), before.epoch());
  EXPECT_EQ(after.workers_epoch(), before.workers_epoch());
  EXPECT_EQ(after.shard_map().version(), before.shard_map().version());
  ASSERT_EQ(after.workers_size(), 1);
  EXPECT_EQ(after.workers(0).id(), worker);
  EXPECT_EQ(after.shard_map().slots(1).member_id(), server);
  scheduler_->CheckLeasesNow();
  EXPECT_TRUE(Heartbeat(worker).ok());
  EXPECT_TRUE(Heartbeat(server).ok());
  EXPECT_EQ(Register(v1::ROLE_WORKER)->member_id(), gone + 1);
  auto got = Get("k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->value(), "v2");
  EXPECT_EQ(got->revision(), 2u);
  EXPECT_EQ(*Put("k", "v3"), 3u);
}

TEST_F(SchedulerTest, BadRequestsAreRejected) {
  Start();
  auto bad_role = Register(v1::ROLE_UNSPECIFIED);
  EXPECT_TRUE(absl::IsInvalidArgument(bad_role.status()));
  EXPECT_THAT(bad_role.status().message(), HasSubstr("role"));
  v1::RegisterRequest req;
  req.set_role(v1::ROLE_WORKER);
  req.set_capacity(-1);
  grpc::ClientContext ctx;
  v1::RegisterResponse resp;
  grpc::Status s = stub_->Register(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("capacity"));
  auto no_address = Register(v1::ROLE_SERVER, 0, "");
  EXPECT_TRUE(no_address.ok());  // the helper fills in an address
  v1::RegisterRequest server;
  server.set_role(v1::ROLE_SERVER);
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub_->Register(&ctx2, server, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::IsInvalidArgument(Put("", "v").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Get("").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Get("k", -1).status()));
}

TEST(SchedulerStartTest, RejectsBadOptions) {
  EXPECT_TRUE(
      absl::IsInvalidArgument(Scheduler::Start({.num_shards = 0}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Scheduler::Start({.consistency = "bsp2"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Scheduler::Start({.lease = absl::ZeroDuration()}).status()));
}

TEST(SchedulerStartTest, RefusesADataDirThatIsNotOurs) {
  const std::string dir = TempDir("foreign");
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "precious.txt") << "data";
  auto s = Scheduler::Start({.data_dir = dir});
  EXPECT_TRUE(absl::IsFailedPrecondition(s.status())) << s.status();
  EXPECT_TRUE(fs::exists(fs::path(dir) / "precious.txt"));
}

TEST(SchedulerStartTest, TwoSchedulersCannotShareAPort) {
  auto a = Scheduler::Start({});
  ASSERT_TRUE(a.ok());
  auto b = Scheduler::Start({.listen_address = (*a)->address()});
  EXPECT_TRUE(absl::IsUnavailable(b.status())) << b.status();
}

// The scheduler validates the job's consistency with the servers' parser:
// a staleness they would refuse is refused here too.
TEST(SchedulerStartTest, ConsistencyIsTheServersSetting) {
  EXPECT_TRUE(Scheduler::Start({.consistency = "ssp:1000000"}).ok());
  for (const char* bad : {"ssp:1000001", "ssp:4294967295", "ssp:+2"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(
        Scheduler::Start({.consistency = bad}).status()))
        << bad;
  }
}

// A worker whose lease runs out (on the simulated clock) hands its units
// back; the next worker to ask gets them first.
TEST_F(SchedulerTest, ExpiredWorkersUnitsAreHandedOutAgain) {
  Start({.consistency = "asp", .lease = absl::Seconds(10)});
  auto a = Register(v1::ROLE_WORKER);
  auto b = Register(v1::ROLE_WORKER);
  ASSERT_TRUE(a.ok() && b.ok());
  auto la = LeaseWork(a->member_id(), 0);
  auto lb = LeaseWork(b->member_id(), 0);
  ASSERT_TRUE(la.ok() && lb.ok()) << la.status() << lb.status();
  ASSERT_EQ(lb->units_size(), 1);
  EXPECT_EQ(lb->units(0).first(), 4);
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(a->member_id()).ok());
  clock_.Advance(absl::Seconds(6));  // b's lease ran out, a's did not
  scheduler_->CheckLeasesNow();
  auto again = LeaseWork(a->member_id(), 1);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_GE(again->units_size(), 1);
  EXPECT_EQ(again->units(0).id(), lb->units(0).id());
  EXPECT_EQ(again->units(0).first(), 4);
  // b is gone: NOT_FOUND tells it to register again.
  EXPECT_EQ(LeaseWork(b->member_id(), 1).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, RegisteringAgainNamesAnEarlierMemberAndANewIncarnation) {
  Start();
  auto first = Register(v1::ROLE_WORKER);
  ASSERT_TRUE(first.ok());
  v1::RegisterRequest req;
  req.set_role(v1::ROLE_WORKER);
  for (auto [worker, incarnation] :
       {std::pair<uint64_t, uint64_t>{first->member_id(), 1},
        {99, 2},
        {0, 2}}) {
    req.set_worker(worker);
    req.set_incarnation(incarnation);
    grpc::ClientContext ctx;
    v1::RegisterResponse resp;
    EXPECT_EQ(stub_->Register(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << worker << " " << incarnation;
  }
  req.set_worker(first->member_id());
  req.set_incarnation(2);
  grpc::ClientContext ctx;
  v1::RegisterResponse resp;
  ASSERT_TRUE(stub_->Register(&ctx, req, &resp).ok());
  bool seen = false;
  for (const v1::Member& m : resp.view().workers()) {
    if (m.id() != resp.member_id()) continue;
    seen = true;
    EXPECT_EQ(m.worker(), first->member_id());
    EXPECT_EQ(m.incarnation(), 2u);
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A server registration of `shard` with the data directory `dir_id`, its
// snapshot steps `held`; `worker`/`incarnation` for registering again.
absl::StatusOr<v1::RegisterResponse> RegisterServer(
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

TEST_F(SchedulerTest, ARestartedServerSupersedesTheLeaseOfItsDataDirectory) {
  Start();
  auto old = RegisterServer(*stub_, 0, "dir-a", {});
  ASSERT_TRUE(old.ok()) << old.status();
  // Another directory is another server: the slot stays taken.
  EXPECT_EQ(RegisterServer(*stub_, 0, "dir-b", {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RegisterServer(*stub_, 0, "", {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The same directory, a new process: admitted at once, the old lease void.
  auto restarted = RegisterServer(*stub_, 0, "dir-a", {});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  const v1::View view = scheduler_->CurrentView();
  ASSERT_EQ(view.servers_size(), 1);
  EXPECT_EQ(view.servers(0).id(), restarted->member_id());
  EXPECT_EQ(view.shard_map().slots(0).member_id(), restarted->member_id());
  EXPECT_EQ(view.generation(), 0u);  // no job under way: nothing rolls back
  EXPECT_EQ(Heartbeat(old->member_id()).status().code(),
            absl::StatusCode::kNotFound);
  // The old process registering again after its lost lease is refused.
  auto zombie = RegisterServer(*stub_, 0, "dir-a", {}, old->member_id(), 2);
  EXPECT_EQ(zombie.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(zombie.status().message()), HasSubstr("superseded"));
}

TEST_F(SchedulerTest, AServerJoiningARunningBspJobRollsItBack) {
  Start({.num_shards = 2, .lease = absl::Seconds(10)});
  auto s0 = RegisterServer(*stub_, 0, "dir-0", {});
  auto s1 = RegisterServer(*stub_, 1, "dir-1", {});
  auto w = Register(v1::ROLE_WORKER);
  ASSERT_TRUE(s0.ok() && s1.ok() && w.ok());
  // The job: batch 8, slots 0 and 1; steps 0..5 applied on both slots.
  auto lease = [&](int64_t step) {
    v1::LeaseWorkRequest req;
    req.set_member_id(w->member_id());
    req.set_step(step);
    req.mutable_job()->set_batch(8);
    req.mutable_job()->set_samples_per_epoch(100);
    req.mutable_job()->add_slots(0);
    req.mutable_job()->add_slots(1);
    grpc::ClientContext ctx;
    v1::LeaseWorkResponse resp;
    return FromGrpcStatus(stub_->LeaseWork(&ctx, req, &resp));
  };
  auto report = [&](uint64_t member, int slot, int64_t step,
                    uint64_t generation) {
    v1::ReportAppliedRequest req;
    req.set_member_id(member);
    v1::AppliedReport* r = req.add_reports();
    r->set_slot(slot);
    r->set_step(step);
    r->set_epoch(scheduler_->CurrentView().workers_epoch());
    r->set_generation(generation);
    grpc::ClientContext ctx;
    v1::ReportAppliedResponse resp;
    EXPECT_TRUE(stub_->ReportApplied(&ctx, req, &resp).ok());
    return resp.recorded();
  };
  for (int64_t step = 0; step < 6; ++step) {
    ASSERT_TRUE(lease(step).ok()) << step;
    report(s0->member_id(), 0, step, 0);
    report(s1->member_id(), 1, step, 0);
  }
  // Slot 0 holds snapshots of steps 2 and 4 (its heartbeat says so).
  v1::HeartbeatRequest hb;
  hb.set_member_id(s0->member_id());
  hb.add_snapshots(2);
  hb.add_snapshots(4);
  grpc::ClientContext hb_ctx;
  v1::HeartbeatResponse hb_resp;
  ASSERT_TRUE(stub_->Heartbeat(&hb_ctx, hb, &hb_resp).ok());

  // Slot 1 restarts holding 2 and 6 (6 is past what slot 0 holds; 4 it
  // lacks): the newest step both hold is 2.
  auto restarted = RegisterServer(*stub_, 1, "dir-1", {2, 6});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(restarted->view().generation(), 1u);
  EXPECT_EQ(restarted->view().rollback_step(), 2);
  // The ledger forgot steps 2..5: step 2 is leased again, and a report of
  // the old generation no longer counts.
  EXPECT_TRUE(lease(2).ok());
  EXPECT_EQ(report(s0->member_id(), 0, 2, 0), 0u);
  EXPECT_EQ(report(s0->member_id(), 0, 2, 1), 1u);

  // A server of a slot restarting with no snapshot rolls back to step 0.
  auto fresh = RegisterServer(*stub_, 0, "dir-0", {});
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->view().generation(), 2u);
  EXPECT_EQ(fresh->view().rollback_step(), 0);
}

}  // namespace
}  // namespace strata
