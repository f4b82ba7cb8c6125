// The parameter server's Prometheus series: requests by method and answer
// code, their latency (queueing and gate waits included), and the shard's
// own counters (applied, rejected by reason, bytes, BSP gate waits), read
// when scraped. Private to server/.
#ifndef STRATA_SERVER_SERVER_METRICS_H_
#define STRATA_SERVER_SERVER_METRICS_H_

#include <atomic>
#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "server/shard.h"

namespace strata {

class ServerMetrics {
 public:
  enum Method { kPush, kPull, kCommit, kMethods };

  // Adds the series to `metrics`; `shard`, `shm_payloads` (pushes and
  // pulls served through shared memory) and `shm_tensor_payloads` (those
  // of them in place in a caller's tensor region) are read when scraped.
  // All must outlive the series' last scrape.
  ServerMetrics(Metrics* metrics, const Shard* shard,
                std::function<uint64_t()> shm_payloads,
                std::function<uint64_t()> shm_tensor_payloads);

  // One request of `method` answered with `status`, `took` after it
  // arrived. Thread-safe.
  void Answered(Method method, const absl::Status& status, absl::Duration took);

 private:
  static constexpr int kCodes = 17;  // absl::StatusCode 0..16
  Metrics* metrics_;
  Histogram* seconds_[kMethods];
  std::atomic<Counter*> requests_[kMethods][kCodes] = {};
};

}  // namespace strata

#endif  // STRATA_SERVER_SERVER_METRICS_H_
