// Small ops sharing one call (PsClientOptions::batch_max_bytes, ps.proto
// PushBatch/PullBatch) against a real server over real gRPC: the same
// weights as one call per op on every payload path, each request answered
// apart (one refused, the others applied), and batches the server must
// refuse or cut short.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "client/ps_client.h"
#include "common/shm_region.h"
#include "common/status.h"
#include "testing/server/ps_cluster.h"

namespace strata {
namespace {

using ::strata::testing::Cluster;
using ::strata::testing::Connect;
using ::strata::testing::ServerStub;
using ::strata::testing::StartCluster;
using ::strata::testing::StartScheduler;
using ::strata::testing::TrainStepsIn;

struct Outcome {
  std::vector<float> w, b;
  uint64_t batch_calls = 0, batched_requests = 0;
  uint64_t shm_payloads = 0, shm_tensor_payloads = 0;
};

// 5 steps and a final pull through a cluster whose worker has `options`,
// with one call in flight: a tensor's chunks (w has 3) queue behind it.
// With `region`, the tensors lie in a region the server maps.
Outcome TrainRun(PsClientOptions options, bool region = false) {
  options.max_in_flight_per_server = 1;
  Cluster c;
  StartCluster(c, options);
  if (::testing::Test::HasFatalFailure()) return {};
  std::vector<float> local(260);
  float* w = local.data();
  std::shared_ptr<ShmRegion> shared;
  if (region) {
    shared = *ShmRegion::Create(ShmRegion::kHeaderBytes + 4096);
    w = reinterpret_cast<float*>(shared->data() + ShmRegion::kHeaderBytes);
    c.ps->ShareTensors(shared);
  }
  float* b = w + 256;  // zeros
  TrainStepsIn(*c.ps, 0, 5, w, b);
  EXPECT_TRUE(c.ps->PullTensor(0, w, 5, 5).ok());
  EXPECT_TRUE(c.ps->PullTensor(1, b, 5, 5).ok());
  Outcome run;
  run.w.assign(w, w + 250);
  run.b.assign(b, b + 3);
  auto stats = c.ps->Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (stats.ok()) {
    run.batch_calls = (*stats)[0].batch_calls();
    run.batched_requests = (*stats)[0].batched_requests();
    run.shm_payloads = (*stats)[0].shm_payloads();
    run.shm_tensor_payloads = (*stats)[0].shm_tensor_payloads();
  }
  return run;
}

enum class Path { kMessages, kSlots, kRegion };

TEST(Batches, TrainToTheSameWeightsAsOneCallPerOp) {
  for (const Path path : {Path::kMessages, Path::kSlots, Path::kRegion}) {
    for (const v1::DType dtype : {v1::DTYPE_F32, v1::DTYPE_BF16}) {
      // bf16 payloads never go in place.
      if (path == Path::kRegion && dtype == v1::DTYPE_BF16) continue;
      SCOPED_TRACE(::testing::Message()
                   << static_cast<int>(path) << ", "
                   << (dtype == v1::DTYPE_F32 ? "fp32" : "bf16"));
      PsClientOptions options;
      options.shared_memory = path != Path::kMessages;
      options.push_dtype = options.pull_dtype = dtype;
      options.batch_max_bytes = 0;
      const bool region = path == Path::kRegion;
      const Outcome single = TrainRun(options, region);
      options.batch_max_bytes = 64 << 10;
      const Outcome batched = TrainRun(options, region);
      ASSERT_EQ(single.w.size(), 250u);
      EXPECT_EQ(batched.w, single.w);  // bit-identical
      EXPECT_EQ(batched.b, single.b);
      EXPECT_EQ(single.batch_calls, 0u);
      // Per step one batch of w's 3 chunks for the pull and one for the
      // push (b's one chunk goes alone), and the final pull of w.
      EXPECT_EQ(batched.batch_calls, 5u * 2 + 1);
      EXPECT_EQ(batched.batched_requests, 3u * (5 * 2 + 1));
      // 5 steps of 4 chunk pushes and 3 pulls, and the final 4 pulls, each
      // through the path; batched ones in place in the region or in the
      // message, not in a slot: b's pushes and its final pull alone there.
      switch (path) {
        case Path::kMessages:
          EXPECT_EQ(single.shm_payloads + batched.shm_payloads, 0u);
          break;
        case Path::kSlots:
          EXPECT_EQ(single.shm_payloads, 5u * 7 + 4);
          EXPECT_EQ(batched.shm_payloads, 5u + 1);
          break;
        case Path::kRegion:
          EXPECT_EQ(single.shm_tensor_payloads, 5u * 7 + 4);
          EXPECT_EQ(batched.shm_tensor_payloads, 5u * 7 + 4);
          break;
      }
    }
  }
}

// A worker's default with a server on its host: bf16 in messages, fp32
// through shared memory. A batched op takes no slot, and still goes fp32
// (in its message): its rounding does not depend on whether it went alone.
TEST(Batches, KeepFp32WhereSharedMemoryWouldCarryIt) {
  PsClientOptions options;
  options.push_dtype = options.pull_dtype = v1::DTYPE_BF16;
  options.push_fp32_through_shm = options.pull_fp32_through_shm = true;
  options.batch_max_bytes = 0;
  const Outcome single = TrainRun(options);
  options.batch_max_bytes = 64 << 10;
  const Outcome batched = TrainRun(options);
  ASSERT_EQ(single.w.size(), 250u);
  EXPECT_GT(batched.batch_calls, 0u);
  EXPECT_EQ(batched.w, single.w);  // bit-identical: no bf16 rounding
  EXPECT_EQ(batched.b, single.b);
}

// A payload in place in the tensor region adds nothing to a batch's
// message: such ops share calls up to 4 MiB, messages' only under
// batch_max_bytes (here 1 byte: no chunk is under it).
TEST(Batches, OpsInPlaceShareCallsAboveTheThreshold) {
  for (const Path path : {Path::kMessages, Path::kSlots, Path::kRegion}) {
    SCOPED_TRACE(static_cast<int>(path));
    PsClientOptions options;
    options.shared_memory = path != Path::kMessages;
    options.batch_max_bytes = 0;
    const Outcome single = TrainRun(options, path == Path::kRegion);
    options.batch_max_bytes = 1;
    const Outcome run = TrainRun(options, path == Path::kRegion);
    ASSERT_EQ(run.w.size(), 250u);
    EXPECT_EQ(run.w, single.w);  // bit-identical
    EXPECT_EQ(run.b, single.b);
    if (path == Path::kRegion) {
      // As with chunks under the threshold: w's 3 chunks together per
      // pull and push, and the final pull; every payload in place.
      EXPECT_EQ(run.batch_calls, 5u * 2 + 1);
      EXPECT_EQ(run.batched_requests, 3u * (5 * 2 + 1));
      EXPECT_EQ(run.shm_tensor_payloads, 5u * 7 + 4);
    } else {
      EXPECT_EQ(run.batch_calls, 0u);
    }
  }
}

TEST(Batches, OneRefusedRequestLeavesTheOthersApplied) {
  PsClientOptions options;
  options.max_in_flight_per_server = 1;
  Cluster c;
  StartCluster(c, options);
  if (HasFatalFailure()) return;
  std::vector<float> grad(250, 0.5f);
  grad[240] = std::numeric_limits<float>::quiet_NaN();  // in chunk 2
  std::vector<OpHandle> ops = c.ps->PushTensorAsync(0, grad.data(), 0, 4);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_TRUE(ops[0].Wait().ok()) << ops[0].Wait();
  EXPECT_TRUE(ops[1].Wait().ok()) << ops[1].Wait();
  const absl::Status refused = ops[2].Wait();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  auto stats = c.ps->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  const v1::StatsResponse& s = (*stats)[0];
  EXPECT_EQ(s.batch_calls(), 1u);
  EXPECT_EQ(s.batched_requests(), 3u);
  EXPECT_EQ(s.pushes_rejected_nonfinite(), 1u);
  const ChunkPlan& plan = c.ps->plan();
  // BSP with one worker: each applied push closed its chunk's step 0.
  EXPECT_EQ(s.chunk_versions().at(plan.chunks[0].id), 1u);
  EXPECT_EQ(s.chunk_versions().at(plan.chunks[1].id), 1u);
  EXPECT_EQ(s.chunk_versions().at(plan.chunks[2].id), 0u);
}

// A pull of `chunk` by `c`'s worker at `clock`, serialized.
std::string PullBytes(const Cluster& c, int chunk, int64_t clock) {
  v1::PullRequest req;
  req.set_member_id(c.worker->member_id());
  req.set_chunk_id(c.ps->plan().chunks[chunk].id);
  req.set_clock(clock);
  return req.SerializeAsString();
}

absl::StatusOr<v1::BatchResponse> PullBatch(v1::ParameterServer::Stub& stub,
                                            const v1::BatchRequest& req) {
  grpc::ClientContext ctx;
  v1::BatchResponse resp;
  STRATA_RETURN_IF_ERROR(FromGrpcStatus(stub.PullBatch(&ctx, req, &resp)));
  return resp;
}

TEST(Batches, TheServerRefusesEmptyOversizedAndGarbledBatches) {
  Cluster c;
  StartCluster(c);
  if (HasFatalFailure()) return;
  auto stub = ServerStub(c);
  v1::BatchRequest empty;
  EXPECT_TRUE(absl::IsInvalidArgument(PullBatch(*stub, empty).status()));
  v1::BatchRequest oversized;
  for (int i = 0; i < 4097; ++i) oversized.add_requests(PullBytes(c, 0, -1));
  EXPECT_TRUE(absl::IsInvalidArgument(PullBatch(*stub, oversized).status()));
  auto stats = c.ps->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].pulls(), 0u);  // none of their requests was served

  // A garbled request is its own error; the batch's others are served.
  v1::BatchRequest mixed;
  mixed.add_requests(PullBytes(c, 0, -1));
  mixed.add_requests(std::string("\xff\x01garbage", 9));
  mixed.add_requests(PullBytes(c, 2, -1));
  auto answered = PullBatch(*stub, mixed);
  ASSERT_TRUE(answered.ok()) << answered.status();
  ASSERT_EQ(answered->answers_size(), 3);
  for (int i : {0, 2}) {
    EXPECT_EQ(answered->answers(i).code(), 0) << answered->answers(i).message();
    v1::PullResponse pulled;
    ASSERT_TRUE(pulled.ParseFromString(answered->answers(i).response()));
    EXPECT_EQ(pulled.data().size(),
              c.ps->plan().chunks[i].numel * sizeof(float));
  }
  EXPECT_NE(answered->answers(1).code(), 0);
  EXPECT_TRUE(answered->answers(1).response().empty());
}

// A cluster whose server waits `max_wait` at the gate and `view_wait` for
// a view or generation.
void StartWaiting(Cluster& c, absl::Duration max_wait,
                  absl::Duration view_wait) {
  c.scheduler = StartScheduler();
  ServerOptions o;
  o.scheduler_address = c.scheduler->address();
  o.max_wait = max_wait;
  o.view_wait = view_wait;
  auto server = ParameterServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  c.server = std::move(*server);
  Connect(c);
}

// Separate calls sent at once would each wait max_wait from their start:
// a batch's pulls share one, from the batch's start, and those whose gate
// is open are served.
TEST(Batches, PullsShareOneGateWait) {
  Cluster c;
  StartWaiting(c, absl::Milliseconds(300), absl::Seconds(5));
  if (HasFatalFailure()) return;
  auto stub = ServerStub(c);
  v1::BatchRequest req;
  req.add_requests(PullBytes(c, 0, 1));   // step 0 never closes: waits
  req.add_requests(PullBytes(c, 1, -1));  // no gate
  req.add_requests(PullBytes(c, 2, 1));   // waits after the first did
  auto answered = PullBatch(*stub, req);
  ASSERT_TRUE(answered.ok()) << answered.status();
  ASSERT_EQ(answered->answers_size(), 3);
  for (int i : {0, 2}) {
    EXPECT_EQ(answered->answers(i).code(),
              static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  }
  EXPECT_EQ(answered->answers(1).code(), 0) << answered->answers(1).message();
  // The first was let wait what the batch had (about all of max_wait);
  // the third only what was left after the first's wait ran out: nothing.
  EXPECT_NE(answered->answers(0).message().find("left of max_wait 300ms"),
            std::string::npos)
      << answered->answers(0).message();
  EXPECT_NE(answered->answers(2).message().find("waited 0 at the gate"),
            std::string::npos)
      << answered->answers(2).message();
}

// A server behind the caller's rollback generation answers UNAVAILABLE
// after view_wait: the batch's later requests are answered UNAVAILABLE
// untried (not after one view_wait each), for the client to retry.
TEST(Batches, RequestsAfterAnUnavailableOneAreNotTried) {
  Cluster c;
  StartWaiting(c, absl::Seconds(10), absl::Milliseconds(200));
  if (HasFatalFailure()) return;
  auto stub = ServerStub(c);
  v1::BatchRequest req;
  for (int chunk : {0, 1, 2}) {
    v1::PullRequest pull;
    pull.ParseFromString(PullBytes(c, chunk, -1));
    pull.set_generation(c.worker->view().generation() + 7);  // not yet here
    req.add_requests(pull.SerializeAsString());
  }
  auto answered = PullBatch(*stub, req);
  ASSERT_TRUE(answered.ok()) << answered.status();
  ASSERT_EQ(answered->answers_size(), 3);
  for (const v1::BatchAnswer& a : answered->answers()) {
    EXPECT_EQ(a.code(), static_cast<int>(absl::StatusCode::kUnavailable));
  }
  EXPECT_NE(answered->answers(0).message().find("rollback generation"),
            std::string::npos)
      << answered->answers(0).message();
  for (int i : {1, 2}) {
    EXPECT_NE(answered->answers(i).message().find("not tried"),
              std::string::npos)
        << answered->answers(i).message();
  }
}

}  // namespace
}  // namespace strata
