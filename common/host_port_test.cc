#include "common/host_port.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(HostPort, ParsesNamesV4AndBracketedV6) {
  auto a = ParseHostPort("127.0.0.1:7070");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7070);
  auto b = ParseHostPort("[::1]:0");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 0);
  auto c = ParseHostPort("scheduler.local:65535");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "scheduler.local");
}

TEST(HostPort, RefusesWhatGrpcWouldRetryUntilItsDeadline) {
  for (const char* bad :
       {":::not-an-address", "127.0.0.1", "127.0.0.1:", ":7070", "[::1]7070",
        "[::1:7070", "::1:7070", "host:65536", "host:-1", "host:+80",
        "host:80x", "a host:80", "host:99999999999999999999"}) {
    auto r = ParseHostPort(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << bad;
    EXPECT_NE(r.status().message().find("want host:port"), std::string::npos)
        << r.status();
  }
  // A long one is quoted by its start only.
  auto long_one = ParseHostPort(std::string(100000, 'h'));
  EXPECT_LT(long_one.status().message().size(), 200u);
}

}  // namespace
}  // namespace strata
