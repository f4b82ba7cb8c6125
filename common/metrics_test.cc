#include "common/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics_http.h"

namespace strata {
namespace {

TEST(Metrics, RendersEachTypeInTheTextFormat) {
  Metrics m;
  Counter& pushes =
      m.AddCounter("strata_pushes_total", "Pushes applied", {{"shard", "0"}});
  Gauge& members = m.AddGauge("strata_members", "Live members");
  Histogram& h = m.AddHistogram("strata_push_seconds", "Push latency", {0.1, 1},
                                {{"method", "push"}});
  m.AddCounterFn("strata_read_total", "Read when scraped", [] { return 7.5; });
  pushes.Add(3);
  pushes.Add(-1);  // counters never fall
  members.Set(4);
  h.Observe(0.05);
  h.Observe(0.1);  // on a bound: counted in that bucket
  h.Observe(5);
  const std::string text = m.Render();
  EXPECT_NE(text.find("# HELP strata_pushes_total Pushes applied\n"
                      "# TYPE strata_pushes_total counter\n"
                      "strata_pushes_total{shard=\"0\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE strata_members gauge\nstrata_members 4\n"),
            std::string::npos);
  EXPECT_NE(
      text.find("strata_push_seconds_bucket{method=\"push\",le=\"0."
                "10000000000000001\"} 2\n"
                "strata_push_seconds_bucket{method=\"push\",le=\"1\"} 2\n"
                "strata_push_seconds_bucket{method=\"push\",le=\"+Inf\"} 3\n"
                "strata_push_seconds_sum{method=\"push\"} 5.1500000000000004\n"
                "strata_push_seconds_count{method=\"push\"} 3\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("strata_read_total 7.5\n"), std::string::npos);
}

TEST(Metrics, SeriesOfOneFamilyShareItsHeaderAndEscapeLabels) {
  Metrics m;
  m.AddCounter("strata_requests_total", "Requests", {{"code", "OK"}}).Add();
  m.AddCounter("strata_requests_total", "Requests", {{"code", "a\"b\\c\nd"}})
      .Add(2);
  const std::string text = m.Render();
  size_t headers = 0;
  for (size_t at = 0; (at = text.find("# TYPE", at)) != std::string::npos;
       ++at) {
    ++headers;
  }
  EXPECT_EQ(headers, 1u);
  EXPECT_NE(text.find("strata_requests_total{code=\"a\\\"b\\\\c\\nd\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(*SampleValue(text, "strata_requests_total{code=\"OK\"}"), 1);
  EXPECT_TRUE(absl::IsNotFound(
      SampleValue(text, "strata_requests_total{code=\"NO\"}").status()));
  EXPECT_TRUE(absl::IsNotFound(SampleValue(text, "strata_requests").status()));
}

TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
  Metrics m;
  Counter& c = m.AddCounter("c_total", "c");
  Histogram& h = m.AddHistogram("h_seconds", "h", Histogram::LatencyBounds());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Add();
        h.Observe(0.001);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), 40000);
  EXPECT_EQ(h.Count(), 40000u);
  EXPECT_NEAR(h.Sum(), 40.0, 1e-6);
}

TEST(MetricsEndpoint, ServesTheRegistryOverHttp) {
  Metrics m;
  Counter& c = m.AddCounter("strata_steps_total", "Steps");
  AddProcessMetrics(m, ::testing::TempDir());
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0, &m);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string address = (*endpoint)->address();
  auto before = ScrapeMetrics(address);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(*SampleValue(*before, "strata_steps_total"), 0);
  c.Add(5);
  auto after = ScrapeMetrics(address);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*SampleValue(*after, "strata_steps_total"), 5);
  EXPECT_GT(*SampleValue(*after, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(*SampleValue(*after, "strata_data_dir_bytes"), 0);
  EXPECT_GT(*SampleValue(*after, "strata_data_dir_free_bytes"), 0);

  // A second endpoint cannot take the same port; a bad port is named.
  auto taken = MetricsEndpoint::Start("127.0.0.1", (*endpoint)->port(), &m);
  EXPECT_TRUE(absl::IsUnavailable(taken.status())) << taken.status();
  EXPECT_TRUE(absl::IsInvalidArgument(
      MetricsEndpoint::Start("127.0.0.1", 70000, &m).status()));

  // Bound but not serving yet: 503, named.
  auto bound = MetricsEndpoint::Bind("127.0.0.1", 0);
  ASSERT_TRUE(bound.ok());
  auto early = ScrapeMetrics((*bound)->address());
  EXPECT_TRUE(absl::IsInternal(early.status())) << early.status();
  EXPECT_NE(early.status().message().find("503"), std::string::npos);
  (*bound)->Serve(&m);
  EXPECT_TRUE(ScrapeMetrics((*bound)->address()).ok());

  endpoint->reset();  // stops serving
  auto gone = ScrapeMetrics(address, 1);
  EXPECT_TRUE(absl::IsUnavailable(gone.status())) << gone.status();
}

}  // namespace
}  // namespace strata
