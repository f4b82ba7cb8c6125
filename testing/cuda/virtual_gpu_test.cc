// The virtual GPU's streams (testing/cuda/virtual_streams.h): queued work
// runs in stream order only when something waits for it, so the tests of
// GPU code see a read that misses its wait as wrong bytes.
#include "testing/cuda/emulation.h"  // first: it configures the kernels
// (blank line keeps the include order)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/launch.cuh"
#include "testing/cuda/virtual_streams.h"

namespace strata::vgpu {
namespace {

constexpr int kN = 64;

void AddOne(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

void LaunchAddOne(float* x, cudaStream_t s) {
  STRATA_LAUNCH(AddOne, 1, kN, 0, s, x, kN);
}

// A device buffer of kN floats, freed at the end.
class DeviceFloats {
 public:
  DeviceFloats() {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p_), kN * 4), cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(p_); }
  float* get() const { return p_; }
  std::vector<float> Read() const {  // synchronous: runs every stream first
    std::vector<float> out(kN);
    EXPECT_EQ(cudaMemcpy(out.data(), p_, kN * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  float* p_ = nullptr;
};

// kN host floats on a page of their own, pinned with cudaHostRegister
// (a driver pins whole pages and refuses one pinned twice).
class PinnedFloats {
 public:
  explicit PinnedFloats(float value)
      : p_(new (std::align_val_t{4096}) float[1024]) {
    std::fill(p_, p_ + kN, value);
    EXPECT_EQ(cudaHostRegister(p_, kN * 4, 0), cudaSuccess);
  }
  ~PinnedFloats() {
    if (pinned_) cudaHostUnregister(p_);
    ::operator delete[](p_, std::align_val_t{4096});
  }
  float* data() { return p_; }
  std::vector<float> values() const { return {p_, p_ + kN}; }
  void Fill(float value) { std::fill(p_, p_ + kN, value); }
  cudaError_t Unpin() {
    pinned_ = false;
    return cudaHostUnregister(p_);
  }

 private:
  float* p_;
  bool pinned_ = true;
};

struct Streams {
  Streams() {
    cudaStreamCreate(&a);
    cudaStreamCreate(&b);
    cudaEventCreateWithFlags(&e, 0);
  }
  ~Streams() {
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }
  cudaStream_t a = nullptr, b = nullptr;
  cudaEvent_t e = nullptr;
};

TEST(VirtualGpuStreams, WorkOnAnotherStreamDoesNotWaitUnlessTold) {
  PinnedFloats host(2.0f);
  DeviceFloats x;
  Streams s;
  // b's kernel does not wait for a's copy: it runs on the bytes cudaMalloc
  // left (NaN), and a's copy, run later, overwrites its result.
  ASSERT_EQ(cudaMemcpyAsync(x.get(), host.data(), kN * 4,
                            cudaMemcpyHostToDevice, s.a),
            cudaSuccess);
  LaunchAddOne(x.get(), s.b);
  ASSERT_EQ(cudaStreamSynchronize(s.b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.a), cudaSuccess);
  EXPECT_EQ(x.Read(), std::vector<float>(kN, 2.0f));

  // With the wait, b runs a up to the record first.
  ASSERT_EQ(cudaMemsetAsync(x.get(), 0xff, kN * 4, s.a), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(x.get(), host.data(), kN * 4,
                            cudaMemcpyHostToDevice, s.a),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(s.e, s.a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s.b, s.e, 0), cudaSuccess);
  LaunchAddOne(x.get(), s.b);
  ASSERT_EQ(cudaStreamSynchronize(s.b), cudaSuccess);
  EXPECT_EQ(x.Read(), std::vector<float>(kN, 3.0f));
}

TEST(VirtualGpuStreams, AnEventRunsItsStreamOnlyUpToItsRecord) {
  PinnedFloats src(5.0f), first(0.0f), second(0.0f);
  DeviceFloats x;
  Streams s;
  auto copy = [&](void* dst, const void* from, cudaMemcpyKind kind) {
    ASSERT_EQ(cudaMemcpyAsync(dst, from, kN * 4, kind, s.a), cudaSuccess);
  };
  copy(x.get(), src.data(), cudaMemcpyHostToDevice);
  copy(first.data(), x.get(), cudaMemcpyDeviceToHost);
  ASSERT_EQ(cudaEventRecord(s.e, s.a), cudaSuccess);
  copy(second.data(), x.get(), cudaMemcpyDeviceToHost);
  ASSERT_EQ(cudaEventSynchronize(s.e), cudaSuccess);
  EXPECT_EQ(first.values(), std::vector<float>(kN, 5.0f));
  EXPECT_EQ(second.values(), std::vector<float>(kN, 0.0f));
  ASSERT_EQ(cudaStreamSynchronize(s.a), cudaSuccess);
  EXPECT_EQ(second.values(), std::vector<float>(kN, 5.0f));
}

TEST(VirtualGpuStreams, AWaitKeepsTheRecordItWasQueuedAfter) {
  PinnedFloats one(1.0f), two(2.0f);
  DeviceFloats x, y;
  Streams s;
  ASSERT_EQ(
      cudaMemcpyAsync(x.get(), one.data(), kN * 4, cudaMemcpyHostToDevice, s.a),
      cudaSuccess);
  ASSERT_EQ(cudaEventRecord(s.e, s.a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s.b, s.e, 0), cudaSuccess);
  // Recorded again after more work on a: b's wait still needs only the
  // first record, so b's copy of x sees 1, not 2.
  ASSERT_EQ(
      cudaMemcpyAsync(x.get(), two.data(), kN * 4, cudaMemcpyHostToDevice, s.a),
      cudaSuccess);
  ASSERT_EQ(cudaEventRecord(s.e, s.a), cudaSuccess);
  ASSERT_EQ(
      cudaMemcpyAsync(y.get(), x.get(), kN * 4, cudaMemcpyDeviceToDevice, s.b),
      cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s.a), cudaSuccess);
  EXPECT_EQ(y.Read(), std::vector<float>(kN, 1.0f));
  EXPECT_EQ(x.Read(), std::vector<float>(kN, 2.0f));
}

TEST(VirtualGpuStreams, PageableCopiesBehaveAsCudaDocumentsThem) {
  DeviceFloats x, y;
  Streams s;
  // To the device from pageable memory: the bytes are taken at the call.
  std::vector<float> pageable(kN, 7.0f);
  ASSERT_EQ(cudaMemcpyAsync(x.get(), pageable.data(), kN * 4,
                            cudaMemcpyHostToDevice, s.a),
            cudaSuccess);
  std::fill(pageable.begin(), pageable.end(), -1.0f);
  // To pageable memory: the stream's work runs and the copy lands before
  // the call returns.
  LaunchAddOne(x.get(), s.a);
  std::vector<float> back(kN, 0.0f);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), x.get(), kN * 4,
                            cudaMemcpyDeviceToHost, s.a),
            cudaSuccess);
  EXPECT_EQ(back, std::vector<float>(kN, 8.0f));

  // From pinned memory the copy reads the host when it runs: a host write
  // before then shows.
  PinnedFloats pinned(7.0f);
  ASSERT_EQ(cudaMemcpyAsync(y.get(), pinned.data(), kN * 4,
                            cudaMemcpyHostToDevice, s.b),
            cudaSuccess);
  pinned.Fill(-1.0f);
  ASSERT_EQ(cudaStreamSynchronize(s.b), cudaSuccess);
  EXPECT_EQ(y.Read(), std::vector<float>(kN, -1.0f));
}

TEST(VirtualGpuStreams, SynchronousCallsAndTheDefaultStreamRunEverything) {
  DeviceFloats x;
  Streams s;
  ASSERT_EQ(cudaMemsetAsync(x.get(), 0, kN * 4, s.a), cudaSuccess);
  LaunchAddOne(x.get(), s.a);
  // A kernel on the legacy default stream runs after a's work.
  LaunchAddOne(x.get(), nullptr);
  EXPECT_EQ(x.Read(), std::vector<float>(kN, 2.0f));
}

TEST(VirtualGpuStreams, UnpinningRunsTheCopiesQueuedOnTheRange) {
  DeviceFloats x;
  Streams s;
  PinnedFloats host(4.0f);
  ASSERT_EQ(cudaMemcpyAsync(x.get(), host.data(), kN * 4,
                            cudaMemcpyHostToDevice, s.a),
            cudaSuccess);
  ASSERT_EQ(host.Unpin(), cudaSuccess);
  host.Fill(-1.0f);  // after: not seen
  EXPECT_EQ(x.Read(), std::vector<float>(kN, 4.0f));
}

TEST(VirtualGpuStreams, PinningRefusesAPagePinnedTwiceAsADriverDoes) {
  float* page = new (std::align_val_t{4096}) float[2048];  // two pages
  ASSERT_EQ(cudaHostRegister(page, 64, 0), cudaSuccess);
  EXPECT_TRUE(IsPinned(page, 64));
  // Another range on the same page, then one reaching into it.
  EXPECT_EQ(cudaHostRegister(page + 512, 64, 0),
            cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostRegister(page + 1024 - 4, 64, 0),
            cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_FALSE(IsPinned(page + 1024, 4));
  EXPECT_EQ(cudaHostRegister(page + 1024, 64, 0), cudaSuccess);  // page 2
  EXPECT_EQ(cudaHostUnregister(page + 1), cudaErrorHostMemoryNotRegistered);
  FailNextPin();
  EXPECT_NE(cudaHostRegister(page + 1024 + 512, 64, 0), cudaSuccess);
  cudaGetLastError();
  EXPECT_EQ(cudaHostUnregister(page), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(page + 1024), cudaSuccess);
  ::operator delete[](page, std::align_val_t{4096});
}

TEST(VirtualGpuStreams, ElapsedTimeNeedsBothRecords) {
  Streams s;
  cudaEvent_t never = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&never, 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(s.e, s.a), cudaSuccess);
  float ms = -1;
  EXPECT_NE(cudaEventElapsedTime(&ms, s.e, never), cudaSuccess);
  cudaGetLastError();
  ASSERT_EQ(cudaEventRecord(never, s.a), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, s.e, never), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  cudaEventDestroy(never);
}

TEST(VirtualGpuStreams, CountsLaunches) {
  DeviceFloats x;
  Streams s;
  const int64_t before = LaunchesQueued();
  LaunchAddOne(x.get(), s.a);
  LaunchAddOne(x.get(), s.a);
  EXPECT_EQ(LaunchesQueued() - before, 2);
  ASSERT_EQ(cudaStreamSynchronize(s.a), cudaSuccess);
}

}  // namespace
}  // namespace strata::vgpu
