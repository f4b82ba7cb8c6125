// A process's metrics in Prometheus' text exposition format (version
// 0.0.4): counters, gauges and histograms that code updates as it runs, and
// values read only when scraped (a shard's counters, the process's memory).
// The HTTP side is common/metrics_http.h.
//
// Usage:
//   Metrics metrics;
//   Counter& pushes = metrics.AddCounter("strata_pushes_total", "Pushes");
//   Histogram& seconds = metrics.AddHistogram(
//       "strata_push_seconds", "Push latency", Histogram::LatencyBounds());
//   pushes.Add();  seconds.Observe(0.004);
//   std::string text = metrics.Render();
//
// Names follow Prometheus' rules ([a-zA-Z_:][a-zA-Z0-9_:]*); labels are
// fixed when a series is added. Add* returns a reference that lives as long
// as the Metrics. All methods are thread-safe; Add/Observe/Set are lock-free.
#ifndef STRATA_COMMON_METRICS_H_
#define STRATA_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace strata {

// label name → value, in the order given.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A value that only rises (requests, bytes, seconds spent).
class Counter {
 public:
  // REQUIRES: v >= 0.
  void Add(double v = 1);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down (tokens/s, members, bytes held).
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Counts of observations at or below each upper bound, their sum and count.
class Histogram {
 public:
  // `bounds` rising; a last +Inf bucket is implied.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // 100 µs to ~100 s, doubling: request and wait latencies.
  static std::vector<double> LatencyBounds();

  const std::vector<double>& bounds() const { return bounds_; }
  // Observations in bucket i (not cumulative); i == bounds().size(): +Inf.
  uint64_t BucketCount(size_t i) const {
    return buckets_[i].load(std::memory_order_relaxed);
  }
  uint64_t Count() const { return count_.load(std::memory_order_relaxed); }
  double Sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

class Metrics {
 public:
  Metrics() = default;
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Each adds one series. A series with the same name and labels as one
  // already added is a programming error (CHECK); the same name with other
  // labels joins that family, which must then be of the same type.
  Counter& AddCounter(const std::string& name, const std::string& help,
                      MetricLabels labels = {});
  Gauge& AddGauge(const std::string& name, const std::string& help,
                  MetricLabels labels = {});
  Histogram& AddHistogram(const std::string& name, const std::string& help,
                          std::vector<double> bounds, MetricLabels labels = {});
  // The counter of `name` and `labels`, added at the first call: for series
  // whose labels are known only as requests come (an answer's code).
  Counter& CounterFor(const std::string& name, const std::string& help,
                      const MetricLabels& labels);
  // Series whose value `read` gives when scraped; `read` runs on the
  // scraping thread and must be thread-safe and outlive this Metrics (or be
  // removed with it).
  void AddCounterFn(const std::string& name, const std::string& help,
                    std::function<double()> read, MetricLabels labels = {});
  void AddGaugeFn(const std::string& name, const std::string& help,
                  std::function<double()> read, MetricLabels labels = {});

  // Every series, families in the order first added.
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    MetricLabels labels;
    Counter* counter = nullptr;
    Gauge* gauge = nullptr;
    Histogram* histogram = nullptr;
    std::function<double()> read;
  };
  struct Family {
    std::string name, help;
    Type type;
    std::vector<Series> series;
  };
  Family& FamilyFor(const std::string& name, const std::string& help, Type type,
                    const MetricLabels& labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);
  // Stable addresses for the references handed out.
  std::deque<Counter> counters_ ABSL_GUARDED_BY(mu_);
  std::deque<Gauge> gauges_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Histogram>> histograms_ ABSL_GUARDED_BY(mu_);
};

// Adds the process's resident memory (process_resident_memory_bytes, from
// /proc/self/statm) and, when `data_dir` is not empty, the bytes of the
// files under it (strata_data_dir_bytes) and the free bytes of its file
// system (strata_data_dir_free_bytes).
void AddProcessMetrics(Metrics& metrics, const std::string& data_dir);

}  // namespace strata

#endif  // STRATA_COMMON_METRICS_H_
