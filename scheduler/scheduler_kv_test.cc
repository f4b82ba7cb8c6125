// The scheduler's rendezvous KV store, through its RPCs: put, get (and
// waiting for a key), compare-and-set, range deletes, limits.

#include <string>
#include <thread>

#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/kv_store.h"
#include "testing/scheduler/scheduler_fixture.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace strata
