// The virtual GPU's streams, events and pinned host memory
// (testing/cuda/virtual_gpu.cc implements the CUDA calls on these).
//
// Work queued on a stream (kernels, GEMMs, async copies and memsets) does
// not run when it is queued: it runs in its stream's order when something
// waits for it, and only as far as that wait needs:
//  - cudaStreamSynchronize runs its stream; cudaEventSynchronize runs the
//    event's stream up to its record; cudaStreamWaitEvent queues a wait that,
//    when its own stream reaches it, runs the event's stream up to the record;
//  - synchronous calls (cudaMemcpy, cudaMemset, cudaFree,
//    cudaDeviceSynchronize, cudaHostUnregister) and any work on the legacy
//    default stream (nullptr) run every stream first, in the order the work
//    was queued;
//  - a copy between the device and pageable host memory behaves as CUDA
//    documents: to the device, the host bytes are taken at the call (the
//    copy to the device is queued); to the host, the stream runs and the
//    copy lands before the call returns. Pinned host memory
//    (cudaHostRegister) is read or written only when the queued copy runs.
// So device code that reads what another stream wrote, without waiting for
// that stream, reads the old bytes (0xff after cudaMalloc) whenever its own
// stream is waited for first, and a host buffer changed before its pinned
// copy ran shows in the copy: races a GPU shows only sometimes show on
// every run. A write that should wait for another stream's earlier read
// (or write) goes wrong only where the writer's stream happens to run
// first.
#ifndef STRATA_TESTING_CUDA_VIRTUAL_STREAMS_H_
#define STRATA_TESTING_CUDA_VIRTUAL_STREAMS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace strata::vgpu {

cudaStream_t NewStream();
// Runs the stream's work, then frees it.
void DeleteStream(cudaStream_t stream);
// Queues `work` on `stream`; on nullptr, runs every stream, then `work`.
void Enqueue(cudaStream_t stream, std::function<void()> work);
// Runs everything queued on `stream` (nullptr: on every stream).
void RunStream(cudaStream_t stream);

cudaEvent_t NewEvent();
void DeleteEvent(cudaEvent_t event);
// A record replaces the event's earlier one; waits already queued keep the
// record they were queued after, as in CUDA.
void RecordEvent(cudaEvent_t event, cudaStream_t stream);
void QueueWait(cudaStream_t stream, cudaEvent_t event);
// Runs the recorded event's stream up to its record (nothing for an event
// never recorded).
void RunToEvent(cudaEvent_t event);
// Host milliseconds between the two records' runs; nullopt when either
// event was never recorded.
std::optional<float> ElapsedMs(cudaEvent_t start, cudaEvent_t end);

// As a driver: false when a page of the range is pinned already (or a
// failure was asked for with FailNextPin), and nothing is pinned.
bool Pin(void* ptr, size_t bytes);
// False when no range starts at ptr.
bool Unpin(void* ptr);
// For tests: the next Pin fails, as where a driver cannot pin.
void FailNextPin();
// Whether [ptr, ptr + bytes) lies in one pinned range.
bool IsPinned(const void* ptr, size_t bytes);

// For tests: kernels and GEMMs queued since the process started.
int64_t LaunchesQueued();
// Counts one launch (virtual_gpu.cc, for each kernel and GEMM).
void CountLaunch();

}  // namespace strata::vgpu

#endif  // STRATA_TESTING_CUDA_VIRTUAL_STREAMS_H_
