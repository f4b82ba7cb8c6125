// The caller's tensor region (PsClient::ShareTensors) against a real server
// over real gRPC: pulls written and pushes read in place, and the fence
// that keeps a server from touching the region after a call it did not
// answer in time (DetachShm).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "client/ps_client.h"
#include "common/shm_region.h"
#include "common/status.h"
#include "server/shard.h"
#include "testing/server/ps_cluster.h"

namespace strata {
namespace {

using ::strata::testing::Cluster;
using ::strata::testing::FinalWeights;
using ::strata::testing::RunResult;
using ::strata::testing::StartCluster;
using ::strata::testing::TrainRun;
using ::strata::testing::TrainStepsIn;

// The caller's tensors in a region the server maps (ShareTensors): pulls
// land in place and pushes are copied out of it, to the same weights as
// plain messages. With no room for slots, every payload counted in shared
// memory went through the tensor region; a buffer outside it still works.
TEST(ShmTensors, TrainToTheSameWeightsAsPlainMessages) {
  PsClientOptions plain;
  plain.shared_memory = false;
  const RunResult messages = TrainRun(plain);
  ASSERT_EQ(messages.w.size(), 250u);
  for (const bool slots_too : {false, true}) {
    SCOPED_TRACE(slots_too ? "with slots" : "without slots");
    PsClientOptions options;
    if (!slots_too) options.shm_bytes_per_server = 1;  // no slot fits
    Cluster c;
    StartCluster(c, options);
    if (::testing::Test::HasFatalFailure()) return;
    std::shared_ptr<ShmRegion> region =
        *ShmRegion::Create(ShmRegion::kHeaderBytes + 4096);
    float* w =
        reinterpret_cast<float*>(region->data() + ShmRegion::kHeaderBytes);
    c.ps->ShareTensors(region);
    TrainStepsIn(*c.ps, 0, 5, w, w + 256);
    const RunResult in_place = FinalWeights(c, w, w + 256);
    EXPECT_EQ(in_place.w, messages.w);  // bit-identical
    EXPECT_EQ(in_place.b, messages.b);
    // 5 steps of 4 chunk pushes and 3 pulls, and the final 4 pulls.
    EXPECT_EQ(in_place.shm_payloads, 5u * 7 + 4);
    EXPECT_EQ(in_place.shm_tensor_payloads, 5u * 7 + 4);
    std::vector<float> outside(250);
    ASSERT_TRUE(c.ps->PullTensor(0, outside.data(), 5, 5).ok());
    EXPECT_EQ(outside, messages.w);
    auto stats = c.ps->Stats();
    ASSERT_TRUE(stats.ok());
    // Through a slot when there is one, else in the message.
    EXPECT_EQ((*stats)[0].shm_payloads(),
              in_place.shm_payloads + (slots_too ? 3 : 0));
  }
}

// A region of `floats` floats after its header.
std::shared_ptr<ShmRegion> TensorRegion(size_t floats) {
  auto region = ShmRegion::Create(
      ShmRegion::kHeaderBytes + (floats * sizeof(float) + 4095) / 4096 * 4096);
  EXPECT_TRUE(region.ok()) << region.status();
  return region.ok() ? std::shared_ptr<ShmRegion>(std::move(*region)) : nullptr;
}

// Step 3's gradients, pushed by hand from outside the region.
absl::Status PushStep3(PsClient& ps) {
  std::vector<float> grad(250), zeros(3);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = 0.02f * i - 1.0f;
  STRATA_RETURN_IF_ERROR(ps.PushTensor(0, grad.data(), 3, 4));
  return ps.PushTensor(1, zeros.data(), 3, 4);
}

// Three steps, step 3 pushed by `step3` (PushStep3 when null), two more
// steps; the tensors in a region (`in_region`) or in plain memory.
RunResult FenceRun(PsClientOptions options, bool in_region,
                   const std::function<void(Cluster&, float* w)>& step3) {
  Cluster c;
  StartCluster(c, options);
  if (::testing::Test::HasFatalFailure()) return {};
  std::shared_ptr<ShmRegion> region;
  std::vector<float> plain(256 + 3);
  float* w = plain.data();
  if (in_region) {
    region = TensorRegion(256 + 3);
    if (region == nullptr) return {};
    w = reinterpret_cast<float*>(region->data() + ShmRegion::kHeaderBytes);
    c.ps->ShareTensors(region);
  }
  float* b = w + 256;
  TrainStepsIn(*c.ps, 0, 3, w, b);
  if (step3) {
    step3(c, w);
  } else {
    EXPECT_TRUE(PushStep3(*c.ps).ok());
  }
  TrainStepsIn(*c.ps, 4, 2, w, b);
  return FinalWeights(c, w, b, 6);
}

// A pull into the tensor region whose call ran out of time while the server
// still waited to serve it: the pull completes (with its error) only once
// the server has detached the region's session, so when the server serves
// it later it writes nothing there. Then the client attaches the region
// again and trains in place, to the same weights as plain messages.
// (Before, the client stopped using the region with that server for the
// rest of the run, and the late pull wrote into it.)
TEST(ShmTensors, AnUnansweredPullIsDetachedBeforeItCompletes) {
  PsClientOptions messages;
  messages.shared_memory = false;
  const RunResult expected = FenceRun(messages, false, nullptr);
  ASSERT_EQ(expected.w.size(), 250u);

  PsClientOptions options;
  options.shm_bytes_per_server = 1;  // no slots: only the region
  options.rpc_timeout = absl::Seconds(3);
  uint64_t after_late = 0;
  const RunResult in_place = FenceRun(options, true, [&](Cluster& c, float* w) {
    auto before = c.ps->Stats();
    ASSERT_TRUE(before.ok());
    // 3 steps of 4 chunk pushes and 3 pulls, all in place.
    EXPECT_EQ((*before)[0].shm_tensor_payloads(), 3u * 7);
    // Version 4 comes only with the push of step 3, after the deadline.
    std::vector<OpHandle> late = c.ps->PullTensorAsync(0, w, -1, 4);
    ASSERT_EQ(late.size(), 3u);  // chunks of 100, 100 and 50
    for (const OpHandle& h : late) {
      const absl::Status s = h.Wait();
      EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    }
    const ShardCounters& counters = c.server->shard().counters();
    const uint64_t waits = counters.gate_waits.load();
    std::fill(w, w + 250, 42.0f);
    // Let the late pulls be served: each ends its gate wait once its
    // chunk reaches version 4, and finds the session detached.
    ASSERT_TRUE(PushStep3(*c.ps).ok());
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (counters.gate_waits.load() < waits + 3 && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(10));
    ASSERT_GE(counters.gate_waits.load(), waits + 3);
    for (size_t i = 0; i < 250; ++i)
      ASSERT_EQ(w[i], 42.0f) << "the late pull wrote w[" << i << "]";
    auto stats = c.ps->Stats();
    ASSERT_TRUE(stats.ok());
    after_late = (*stats)[0].shm_tensor_payloads();
  });
  EXPECT_EQ(in_place.w, expected.w);  // bit-identical
  EXPECT_EQ(in_place.b, expected.b);
  // In place again: 2 steps of 4 pushes and 3 pulls, and the final 4
  // pulls, less the calls made before the new session was attached.
  EXPECT_GE(in_place.shm_tensor_payloads - after_late, 7u);
}

}  // namespace
}  // namespace strata
